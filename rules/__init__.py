"""Filter rules, one module per rule family. Each module registers its rules with `corpus.registry`."""
