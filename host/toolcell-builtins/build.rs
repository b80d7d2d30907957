//! Compiles `guest-tools/` for wasm32-wasip2 and lists the built-in components for `lib.rs`.

fn main() {
    toolcell_guest_build::build_guests(&toolcell_guest_build::GuestWorkspace {
        manifest_dir: "../../guest-tools".as_ref(),
        packages: &[
            ("tool-read-file", "read_file"),
            ("tool-write-file", "write_file"),
            ("tool-edit-file", "edit_file"),
            ("tool-list-files", "list_files"),
            ("tool-search-files", "search_files"),
        ],
        extra_inputs: &["../../wit".as_ref()],
        output_name: "builtins.rs",
    });
}
