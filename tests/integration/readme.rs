//! The README shows the consumer example the tests run, verbatim.

#[test]
fn readme_shows_the_tested_consumer_example() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/retry_consumer.rs")).unwrap();
    assert!(readme.contains(&example), "README.md must include examples/retry_consumer.rs verbatim");
}
