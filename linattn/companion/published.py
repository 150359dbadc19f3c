"""The published readings and how ours compare with them, under the one name figure modules, notebooks and the
report use (``published.<name>``), re-exported from the three modules that hold them:

* :mod:`~linattn.companion.published_readings`: the hand-read published curves and the numbers the paper states;
* :mod:`~linattn.companion.published_rules`: measuring ours, differences and verdicts, Figure 3a's one-to-one
  pairing, the claims of the paper's text;
* :mod:`~linattn.companion.published_page`: tables, sentences and ``numbers.json`` rows for the pages and the report.
"""

from __future__ import annotations

from .published_page import (
                             REPORT_GROUPS,
                             caption_lead,
                             claims_table,
                             counts,
                             number_rows,
                             page_name,
                             paper_name,
                             report_group,
                             short_quantity,
                             summary,
                             table,
)
from .published_readings import (
                             BEYOND,
                             FIG1B,
                             FIG1B_FINAL,
                             FIG1B_IMAGE,
                             FIG1B_PLATEAU,
                             FIG3A_CROSSINGS,
                             FIG3A_IMAGE,
                             FIG3A_LAST_STEP,
                             FIG3A_PLATEAU_READINGS,
                             FIG3A_PLATEAUS,
                             FIG3A_STILL_ON_M3,
                             FIG3B_FINAL_VALUES,
                             FIG4_R1_PLATEAUS,
                             FIG5_ATTN_M_DROPS,
                             FIG14,
                             FIG14_IMAGE,
                             FIG14_LAST_STEP,
                             WHITE_L_STAR,
                             Crossing,
                             Image,
                             Reading,
                             _at,
                             fig3a_drop_span,
                             fig14_landmarks,
)
from .published_rules import (
                             Claim,
                             check_words,
                             compare,
                             crossing_distance,
                             difference,
                             drop_count_holds,
                             fig1b_comparison,
                             fig3a_comparison,
                             fig4_plateau_claim,
                             fig5_single_drop_claim,
                             fig14_comparison,
                             in_tolerances,
                             match_one_to_one,
                             measure,
                             signed_distance,
                             slug,
)

__all__ = [
    # the readings
    "Image", "Reading", "Crossing", "FIG1B_IMAGE", "FIG3A_IMAGE", "FIG14_IMAGE", "FIG1B", "FIG3A_CROSSINGS",
    "FIG3A_PLATEAU_READINGS", "FIG3A_LAST_STEP", "FIG3A_STILL_ON_M3", "BEYOND", "FIG14", "FIG14_LAST_STEP",
    "FIG1B_PLATEAU", "FIG1B_FINAL", "FIG3A_PLATEAUS", "FIG3B_FINAL_VALUES", "WHITE_L_STAR", "FIG4_R1_PLATEAUS",
    "FIG5_ATTN_M_DROPS", "fig3a_drop_span", "fig14_landmarks", "_at",
    # the comparison rules
    "measure", "difference", "compare", "crossing_distance", "signed_distance", "match_one_to_one",
    "fig1b_comparison", "fig3a_comparison", "fig14_comparison", "Claim", "fig4_plateau_claim",
    "fig5_single_drop_claim", "drop_count_holds", "check_words", "slug", "in_tolerances",
    # the page and report helpers
    "table", "summary", "counts", "claims_table", "number_rows", "REPORT_GROUPS", "report_group", "caption_lead",
    "paper_name", "page_name", "short_quantity",
]
