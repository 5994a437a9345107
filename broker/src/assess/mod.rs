//! Gates that turn host facts into availability, blockers, warnings and an install plan.
