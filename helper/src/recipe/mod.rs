//! (placeholder; owned by the recipe engineer)
