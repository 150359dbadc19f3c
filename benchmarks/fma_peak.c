/* The CPU's fused multiply-add throughput for benchmarks/bench_softmax.py's compute floor: ACC independent chains of
 * vector FMAs (enough to cover the FMA latency on two units), each vector LANES wide as in softmax_kernel.c (512 bits
 * where the compiler targets AVX-512, else 256). Compiled with the kernels' flags (native.isa_flags). */
#ifdef USE_DOUBLE
typedef double real;
#define WIDTH 8
#else
typedef float real;
#define WIDTH 16
#endif
#ifdef __AVX512F__
#define LANES WIDTH
#else
#define LANES (WIDTH / 2)
#endif
#define ACC 12
typedef real vec __attribute__((vector_size(LANES * sizeof(real))));

int lanes(void) { return LANES; }

/* rounds x ACC vector FMAs; returns a sum of the results so that the compiler keeps the loop */
double fmas(long rounds, real a, real b) {
    vec acc[ACC];
    for (int i = 0; i < ACC; i++) acc[i] = (vec){0} + (real)i;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < ACC; i++) acc[i] = acc[i] * a + b;
    }
    double s = 0;
    for (int i = 0; i < ACC; i++)
        for (int l = 0; l < LANES; l++) s += acc[i][l];
    return s;
}
