use serde_json::json;
use toolcell_tests::Fixture;

#[test]
fn smoke() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "one\ntwo\n");
    let output = fixture.ok("read_file", json!({"path": "a.txt"}));
    eprintln!("{}\n{:?}", output.text, output.structured);
    let probe = fixture.call("fs_probe", &json!({"ops": [
        {"op": "read", "path": "a.txt"},
        {"op": "read", "path": "/etc/passwd"},
        {"op": "read", "path": "../outside/secret.txt"},
        {"op": "list", "path": "."},
        {"op": "list", "path": "/"},
        {"op": "cwd", "path": ""},
        {"op": "canonicalize", "path": "a.txt"},
        {"op": "env", "path": ""},
    ]}));
    eprintln!("{:#?}", probe.result);
}
