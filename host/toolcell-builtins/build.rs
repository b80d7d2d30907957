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
            ("tool-read-many", "read_many"),
            ("tool-file-info", "file_info"),
            ("tool-directory-tree", "directory_tree"),
            ("tool-create-directory", "create_directory"),
            ("tool-insert-text", "insert_text"),
            ("tool-move-file", "move_file"),
            ("tool-delete-file", "delete_file"),
            ("tool-apply-patch", "apply_patch"),
        ],
        extra_inputs: &["../../wit".as_ref()],
        output_name: "builtins.rs",
    });
}
