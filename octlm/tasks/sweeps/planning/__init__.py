"""What a sweep tries, decided before anything trains (torch-free): ``sweep new``'s options parsed and checked
(``spec``), the samplers' one table and the trial count with its cap (``samplers``), Optuna's ask-and-tell for a
sampler that asks as trials finish (``asking``, Optuna imported only when used), and the trials made and written as
ordinary experiments, the sweep's rows in one transaction, a sampler's later trials added (``plan``).
"""
