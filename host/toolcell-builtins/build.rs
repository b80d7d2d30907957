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
            ("tool-chain-status", "chain_status"),
            ("tool-chain-list", "chain_list"),
            ("tool-chain-new", "chain_new"),
            ("tool-task-add", "task_add"),
            ("tool-task-list", "task_list"),
            ("tool-task-status", "task_status"),
            ("tool-task-start", "task_start"),
            ("tool-task-complete", "task_complete"),
            ("tool-task-approve", "task_approve"),
            ("tool-task-rework", "task_rework"),
            ("tool-task-block", "task_block"),
            ("tool-task-unblock", "task_unblock"),
            ("tool-task-ready", "task_ready"),
            ("tool-spawn-impl-session", "spawn_impl_session"),
        ],
        extra_inputs: &["../../wit".as_ref()],
        output_name: "builtins.rs",
    });
}
