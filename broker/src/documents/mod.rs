//! Engine descriptors and environment manifests: embedded defaults, signed updates, trust.
