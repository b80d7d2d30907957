//! The embedding example compiles and runs as part of the test suite.

#[path = "../../examples/embed.rs"]
mod embed;

#[test]
fn the_embedding_example_runs() {
    embed::main().expect("the embedding example succeeds");
}
