"""Studies, one package per paper: ``pmd``, ``regret``, ``rate``, ``uat`` (see ``experiments.registry``)."""
