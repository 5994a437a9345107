//! Docker through the Engine API: images, pulls, containers.
