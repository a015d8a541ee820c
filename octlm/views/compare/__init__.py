"""Verdicts on differences (torch-free, numpy-free): Student's t and what rests on it (``student``: p, critical
values, Welch's and Satterthwaite's degrees of freedom, Holm's adjustment, seeds for 80% power, the expected maximum
of normal draws), one record and one wording of every verdict (``noise``), configurations compared over their seeds
(``seeds``), whether two runs may be compared at all (``comparable``), what ``show A B`` says of each against the
first (``versus``), and a sweep's winner with its optimism (``winner``)."""
