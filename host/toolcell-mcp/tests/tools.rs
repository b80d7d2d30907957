//! The MCP server serves every tool of the role, in rmcp's own types.

#[test]
fn every_tool_of_the_role_is_served() {
    let workspace = tempfile::tempdir().expect("workspace");
    let host = toolcell_host::HostBuilder::new(workspace.path()).build().expect("host builds");
    for (role, expected) in [("control", 6), ("impl", 16), ("reviewer", 6)] {
        let server = toolcell_mcp::McpServer::new(host.session(role, "s").expect("session"));
        assert_eq!(server.tools().len(), expected, "{role}");
        for tool in server.tools() {
            let annotations = tool.annotations.as_ref().expect("annotations");
            assert!(annotations.read_only_hint.is_some() && annotations.destructive_hint.is_some());
            assert!(tool.title.is_some());
        }
    }
}
