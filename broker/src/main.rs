//! `enginekit`: the unprivileged broker.

fn main() {
    enginekit_broker::cli::main()
}
