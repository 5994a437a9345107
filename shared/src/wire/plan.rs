//! The requirement plan: availability, blockers, warnings, system changes.
