"""Scenario files: load, validate, and expand the matrix into cells.

A scenario file is YAML. Loading keeps the position of every value, so each
problem is reported as FILE:LINE:COLUMN: PATH: what is wrong; hint.
"""

from niclab.base.problems import Problem, ScenarioError
from niclab.model.scenario.model import BenchmarkSpec, Bond, Link, NodeOptions, Scenario
from niclab.model.scenario.template import Cell, ScenarioFile, cell_id, load_scenario, parse

__all__ = [
    "BenchmarkSpec",
    "Bond",
    "Cell",
    "Link",
    "NodeOptions",
    "Problem",
    "Scenario",
    "ScenarioError",
    "ScenarioFile",
    "cell_id",
    "load_scenario",
    "parse",
]
