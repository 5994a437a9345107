//! Publisher tool for enginekit documents.
fn main() {}
