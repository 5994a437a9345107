//! `enginekit-helper`: the privileged helper.
fn main() {}
