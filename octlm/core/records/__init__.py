"""The records that cross layers, each spelled once: what one logged step of a run says (``runs``: ``RunRecord`` and
its fields), the documents ``--json`` writes (``documents``), and the mappings that are free-form by nature, each
named with its reason (``freeform``). Imported from here.
"""

from octlm.core.records.documents import Checkup, EvalResult, Figures, Problem, ShownFingerprints, TrainResult
from octlm.core.records.runs import (
    EVALUATION_FIELDS,
    LOOP_FIELDS,
    METRIC_FIELDS,
    NESTED_FIELDS,
    NUMBER_FIELDS,
    OPTIONAL_FIELDS,
    RUN_RECORD_FIELDS,
    TEXT_FIELDS,
    TIMING_FIELDS,
    TOTALS,
    Environment,
    RunRecord,
    RunTotals,
    SourceFigures,
)

__all__ = [
    "EVALUATION_FIELDS",
    "LOOP_FIELDS",
    "METRIC_FIELDS",
    "NESTED_FIELDS",
    "NUMBER_FIELDS",
    "OPTIONAL_FIELDS",
    "RUN_RECORD_FIELDS",
    "TEXT_FIELDS",
    "TIMING_FIELDS",
    "TOTALS",
    "Checkup",
    "Environment",
    "EvalResult",
    "Figures",
    "Problem",
    "RunRecord",
    "RunTotals",
    "ShownFingerprints",
    "SourceFigures",
    "TrainResult",
]
