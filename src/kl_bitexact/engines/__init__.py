"""Adapters from the checks to an engine's wire protocol, behind `base.Engine`."""
