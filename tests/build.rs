//! Compiles the guest test programs in `tests/guest-programs/`, and the example third-party
//! tools in `examples/word-count/` and `examples/http-fetch/`, for wasm32-wasip2.

fn main() {
    toolcell_guest_build::build_guests(&toolcell_guest_build::GuestWorkspace {
        manifest_dir: "guest-programs".as_ref(),
        packages: &[("fs-probe", "fs_probe"), ("net-probe", "net_probe"), ("misbehave", "misbehave")],
        extra_inputs: &["../wit".as_ref(), "../guest-tools/sdk".as_ref()],
        output_name: "guest_programs.rs",
    });
    toolcell_guest_build::build_guests(&toolcell_guest_build::GuestWorkspace {
        manifest_dir: "../examples/word-count".as_ref(),
        packages: &[("word-count", "word_count")],
        extra_inputs: &["../wit".as_ref(), "../guest-tools/sdk".as_ref(), "../examples/word-count/src".as_ref()],
        output_name: "examples.rs",
    });
    toolcell_guest_build::build_guests(&toolcell_guest_build::GuestWorkspace {
        manifest_dir: "../examples/http-fetch".as_ref(),
        packages: &[("http-fetch", "http_fetch")],
        extra_inputs: &["../wit".as_ref(), "../guest-tools/sdk".as_ref(), "../examples/http-fetch/src".as_ref()],
        output_name: "network_examples.rs",
    });
}
