//! `fs_probe`: a hostile tool that calls `std::fs` directly on whatever paths it is given, for
//! the host's sandbox tests. It reports what each operation did, so a test can tell whether
//! the host let anything through. `symlink` takes the link path in `path` and its target in `to`.
//! The control operations `panic`, `fail` (a tool error), `sleep` (milliseconds in `content`)
//! and `spin` (forever) let transaction tests stop a call part-way. `open_dir` keeps a handle
//! on a directory (its number is the result) and `list_held` lists through handle `content`,
//! wherever the directory is by then; `repeat` runs the operation `to` (`stat` or `inspect`)
//! on `path` `content` times, and `stat_many` stats `path/0` ... `path/N-1`, for the audit
//! flooding tests. `inspect` asks the host's `context.inspect`, and `stat_at` makes one bare
//! `stat-at` call (no metadata-hash lookups first, as `std::fs` makes). `attach_image` shows
//! `path`'s bytes as an image of type `to`; `remember` keeps `content` under the key `path`
//! and `recall` returns what is kept under it; `candidates` asks the content index for the
//! files under `path` that may match the pattern `content`; `allocate` takes `content` MiB and
//! holds it until the call ends.
//!
//! The `raw_*` operations (`raw_read`, `raw_write`, `raw_stat`, `raw_list`, `raw_mkdir`,
//! `raw_remove`, `raw_rmdir`, `raw_rename`, `raw_link`, `raw_symlink`, and `raw_touch`, which
//! sets the modification time to the epoch) make one `wasi:filesystem` call on the workspace
//! root with the path exactly as given: no SDK check (the built-in tools refuse `..` and
//! absolute paths before the host sees them) and no wasi-libc path handling (which reads `/x`
//! as `x`), so that the host's own judgement of the path is what a test sees.
//!
//! For the adversarial fuzzer: any filesystem operation with `times` > 1 runs that many times
//! (a loop racing another call) and reports each distinct result once; `seek` lists the
//! directory `path` until an entry whose name starts with `content` (before any `|`) appears (up to `times`
//! rounds, 1 ms apart; default 3,000), then runs the action `to` on it: `read`, `write`,
//! `remove`, `hard_link:DEST` or `rename:DEST` (another call's file in flight, found by name);
//! `write` writes what follows the `|`.

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
struct Operation {
    op: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    times: usize,
}

#[derive(Deserialize)]
struct Args {
    ops: Vec<Operation>,
}

struct FsProbe;

impl Tool for FsProbe {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new("fs_probe", "Filesystem probe", "Test program: runs raw std::fs operations.").schema(json!({
            "type": "object",
            "properties": { "ops": { "type": "array" } },
            "required": ["ops"]
        }))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let mut results: Vec<Value> = Vec::new();
        for operation in &args.ops {
            // Control operations, for the host's transaction tests.
            match operation.op.as_str() {
                "panic" => panic!("fs_probe was asked to panic"),
                "fail" => return Err(ToolError::Failed(format!("fs_probe was asked to fail after {} operations", results.len()))),
                "sleep" => std::thread::sleep(std::time::Duration::from_millis(operation.content.parse().unwrap_or(0))),
                "spin" => loop {
                    std::hint::black_box(());
                },
                // Show `path`'s bytes as an image of type `to`, whatever they are: the host
                // must check them.
                "attach_image" => {
                    let data = std::fs::read(&operation.path).map_err(|error| ToolError::Failed(error.to_string()))?;
                    toolcell_sdk::attach_image(&operation.to, &data)?;
                }
                // Ask to run in `content` parts; once split, this instance stops.
                "split" => {
                    let parts = toolcell_sdk::split(operation.content.parse().unwrap_or(2));
                    if parts > 0 {
                        return Ok(Output::text(format!("split into {parts}")));
                    }
                    results.push(json!({ "op": "split", "value": parts }));
                }
                "shard" => results.push(json!({ "op": "shard", "value": toolcell_sdk::shard() })),
                // Take `content` MiB of memory (touched) and hold it until the call ends.
                "allocate" => {
                    let mebibytes: usize = operation.content.parse().unwrap_or(0);
                    HOARD.with(|hoard| hoard.borrow_mut().push(vec![1u8; mebibytes << 20]));
                    results.push(json!({ "op": "allocate", "value": mebibytes }));
                }
                "shard_results" => {
                    let parts = toolcell_sdk::shard_results().map(|parts| {
                        parts
                            .into_iter()
                            .map(|part| match part {
                                Ok(output) => json!({ "ok": output.into_parts().1 }),
                                Err(error) => json!({ "error": toolcell_sdk::error_parts(&error).1 }),
                            })
                            .collect::<Vec<_>>()
                    });
                    results.push(json!({ "op": "shard_results", "value": parts }));
                }
                "remember" => toolcell_sdk::remember(&operation.path, operation.content.as_bytes()),
                // The content index's candidates for the pattern `content` under `path`.
                "candidates" => {
                    let under = toolcell_sdk::WorkspacePath::parse(if operation.path.is_empty() { "." } else { &operation.path })?;
                    let candidates = toolcell_sdk::search_candidates(&operation.content, false, &under);
                    results.push(json!({ "op": "candidates", "value": candidates }));
                }
                "recall" => {
                    let recalled = toolcell_sdk::recall(&operation.path).map(|value| String::from_utf8_lossy(&value).into_owned());
                    results.push(json!({ "op": "recall", "path": operation.path, "value": recalled }));
                }
                "seek" => results.push(seek(operation)),
                _ if operation.times > 1 => {
                    let mut seen = std::collections::BTreeSet::new();
                    for _ in 0..operation.times {
                        let result = run(operation);
                        if seen.len() < 8 && seen.insert(result.to_string()) {
                            results.push(result);
                        }
                    }
                }
                _ => results.push(run(operation)),
            }
        }
        Ok(Output::text(serde_json::to_string(&results).unwrap_or_default()).with_structured(json!(results)))
    }
}

fn run(operation: &Operation) -> Value {
    let path = operation.path.as_str();
    let result: std::io::Result<Value> = match operation.op.as_str() {
        "read" => std::fs::read(path).map(|bytes| json!(String::from_utf8_lossy(&bytes))),
        "write" => std::fs::write(path, &operation.content).map(|()| json!(null)),
        "append" => {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .and_then(|mut file| file.write_all(operation.content.as_bytes()))
                .map(|()| json!(null))
        }
        "hold_open" => {
            // Open `path` `content` times, holding every handle until the end.
            let count: usize = operation.content.parse().unwrap_or(0);
            let mut files = Vec::new();
            (|| {
                for _ in 0..count {
                    files.push(std::fs::File::open(path)?);
                }
                Ok(json!(files.len()))
            })()
        }
        "truncate" => std::fs::OpenOptions::new().write(true).truncate(true).open(path).map(|_| json!(null)),
        // `set-size` to `content` bytes (created if missing), without writing them.
        "set_len" => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .and_then(|file| file.set_len(operation.content.parse().unwrap_or(0)))
            .map(|()| json!(null)),
        // One byte written at the offset `to` (created if missing): a stream that starts there.
        "write_at" => std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path).and_then(|mut file| {
            use std::io::{Seek as _, Write as _};
            file.seek(std::io::SeekFrom::Start(operation.to.parse().unwrap_or(0)))?;
            file.write_all(b"x").map(|()| json!(null))
        }),
        "list" => std::fs::read_dir(path).map(|entries| {
            let mut names: Vec<String> = entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            json!(names)
        }),
        // The same listing in one host call (`toolcell:tool/listing`), with each entry's kind.
        "list_all" => toolcell_sdk::scan::read_dir(path)
            .map(|entries| json!(entries.iter().map(|(name, kind)| json!([name, kind.as_str()])).collect::<Vec<_>>())),
        "stat" => std::fs::metadata(path).map(|m| json!({ "len": m.len(), "dir": m.is_dir() })),
        "lstat" => std::fs::symlink_metadata(path).map(|m| json!({ "len": m.len(), "symlink": m.is_symlink() })),
        "mkdir" => std::fs::create_dir_all(path).map(|()| json!(null)),
        "remove" => std::fs::remove_file(path).map(|()| json!(null)),
        "rmdir" => std::fs::remove_dir(path).map(|()| json!(null)),
        "rename" => std::fs::rename(path, &operation.to).map(|()| json!(null)),
        "symlink" => symlink(&operation.to, path).map(|()| json!(null)),
        "hard_link" => std::fs::hard_link(path, &operation.to).map(|()| json!(null)),
        "read_link" => std::fs::read_link(path).map(|target| json!(target.to_string_lossy())),
        "canonicalize" => std::fs::canonicalize(path).map(|target| json!(target.to_string_lossy())),
        "cwd" => std::env::current_dir().map(|dir| json!(dir.to_string_lossy())),
        "env" => Ok(json!(std::env::vars().collect::<Vec<_>>())),
        "open_dir" => open_dir(path),
        "inspect" => toolcell_sdk::WorkspacePath::parse(path)
            .and_then(|parsed| toolcell_sdk::inspect(&parsed))
            .map(|facts| json!(facts.mode))
            .map_err(|error| std::io::Error::other(format!("{error:?}"))),
        "stat_at" => stat_at(path),
        "open_read" => open_read(path, &operation.to),
        "metadata_hash" => metadata_hash(path),
        "list_held" => list_held(&operation.content),
        "raw_preopens" => raw_preopens(operation.content.parse().unwrap_or(0)),
        "raw_stream_hold" => raw_stream_hold(path, operation.content.parse().unwrap_or(0)),
        "stream_script" => Ok(stream_script(&operation.content)),
        op if op.starts_with("raw_") => raw_call(op, path, &operation.to, &operation.content),
        "repeat" => {
            let count: usize = operation.content.parse().unwrap_or(0);
            let refused = (0..count)
                .filter(|_| match operation.to.as_str() {
                    "inspect" => toolcell_sdk::WorkspacePath::parse(path).and_then(|parsed| toolcell_sdk::inspect(&parsed)).is_err(),
                    // The descriptor calls that judge no path, on the workspace root.
                    "descriptor" => descriptor_calls().is_err(),
                    _ => std::fs::metadata(path).is_err(),
                })
                .count();
            Ok(json!(refused))
        }
        "stat_many" => {
            let count: usize = operation.content.parse().unwrap_or(0);
            Ok(json!((0..count).filter(|index| std::fs::metadata(format!("{path}/{index}")).is_err()).count()))
        }
        other => return json!({ "op": other, "ok": false, "error": "unknown op" }),
    };
    match result {
        Ok(value) => json!({ "op": operation.op, "path": path, "ok": true, "value": value }),
        Err(error) => json!({ "op": operation.op, "path": path, "ok": false, "error": format!("{:?}: {error}", error.kind()) }),
    }
}

/// List `path` until an entry named `content...` appears, then run the action `to` on it.
fn seek(operation: &Operation) -> Value {
    let directory = if operation.path.is_empty() { "." } else { operation.path.as_str() };
    let rounds = if operation.times == 0 { 3000 } else { operation.times };
    let (prefix, data) = operation.content.split_once('|').unwrap_or((operation.content.as_str(), "SEEK-WRITE"));
    for _ in 0..rounds {
        let found = std::fs::read_dir(directory).ok().and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .find(|name| name.starts_with(prefix))
        });
        if let Some(name) = found {
            let path = format!("{directory}/{name}");
            let (action, destination) = operation.to.split_once(':').unwrap_or((operation.to.as_str(), ""));
            let step =
                Operation { op: action.to_owned(), path: path.clone(), to: destination.to_owned(), content: data.to_owned(), times: 0 };
            return json!({ "op": "seek", "found": name, "result": run(&step) });
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    json!({ "op": "seek", "found": null })
}

thread_local! {
    /// Memory held by `allocate`.
    static HOARD: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Directory handles kept open by `open_dir`.
    static HELD: std::cell::RefCell<Vec<wasip2::filesystem::types::Descriptor>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Preopened descriptors asked for again and again by `raw_preopens`, held until the end.
    static PREOPENS: std::cell::RefCell<Vec<wasip2::filesystem::types::Descriptor>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Streams kept by `raw_stream_hold` after their descriptors were dropped.
    static STREAMS: std::cell::RefCell<Vec<wasip2::io::streams::InputStream>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn wasi_error(code: wasip2::filesystem::types::ErrorCode) -> std::io::Error {
    std::io::Error::other(format!("{code:?}"))
}

/// Open the directory `path` through `wasi:filesystem` and keep the handle.
fn open_dir(path: &str) -> std::io::Result<Value> {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
    let root = wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find_map(|(descriptor, name)| (name == ".").then_some(descriptor))
        .ok_or_else(|| std::io::Error::other("no workspace"))?;
    let opened = root.open_at(PathFlags::empty(), path, OpenFlags::DIRECTORY, DescriptorFlags::READ).map_err(wasi_error)?;
    Ok(HELD.with(|held| {
        let mut held = held.borrow_mut();
        held.push(opened);
        json!(held.len() - 1)
    }))
}

/// `stat-at` on the workspace root, without the metadata-hash lookups `std::fs` makes first.
fn stat_at(path: &str) -> std::io::Result<Value> {
    use wasip2::filesystem::types::PathFlags;
    let root = wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find_map(|(descriptor, name)| (name == ".").then_some(descriptor))
        .ok_or_else(|| std::io::Error::other("no workspace"))?;
    let stat = root.stat_at(PathFlags::empty(), path).map_err(wasi_error)?;
    Ok(json!(stat.size))
}

/// The workspace root's preopened descriptor.
fn workspace_root() -> std::io::Result<wasip2::filesystem::types::Descriptor> {
    wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find_map(|(descriptor, name)| (name == ".").then_some(descriptor))
        .ok_or_else(|| std::io::Error::other("no workspace"))
}

/// Open `path` through `wasi:filesystem` with the descriptor flags `flags` names (`read`,
/// `write`, `mutate` joined by `+`), then read it through that descriptor, both with `read`
/// and through a stream: every access the open grants must have been judged.
fn open_read(path: &str, flags: &str) -> std::io::Result<Value> {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
    let mut descriptor_flags = DescriptorFlags::empty();
    for flag in flags.split('+') {
        descriptor_flags |= match flag {
            "read" => DescriptorFlags::READ,
            "write" => DescriptorFlags::WRITE,
            "mutate" => DescriptorFlags::MUTATE_DIRECTORY,
            other => return Err(std::io::Error::other(format!("unknown flag {other}"))),
        };
    }
    let file = workspace_root()?.open_at(PathFlags::empty(), path, OpenFlags::empty(), descriptor_flags).map_err(wasi_error)?;
    let (bytes, _) = file.read(4096, 0).map_err(wasi_error)?;
    let stream = file.read_via_stream(0).map_err(wasi_error)?;
    let streamed = stream.blocking_read(4096).map_err(|error| std::io::Error::other(format!("{error:?}")))?;
    Ok(json!([String::from_utf8_lossy(&bytes), String::from_utf8_lossy(&streamed)]))
}

/// `sync`, `sync-data`, `get-flags`, `get-type`, `metadata-hash`, `advise` and
/// `is-same-object` on the workspace root, once each.
fn descriptor_calls() -> std::io::Result<()> {
    use wasip2::filesystem::types::Advice;
    let root = workspace_root()?;
    root.sync().map_err(wasi_error)?;
    root.sync_data().map_err(wasi_error)?;
    root.get_flags().map_err(wasi_error)?;
    root.get_type().map_err(wasi_error)?;
    root.metadata_hash().map_err(wasi_error)?;
    root.advise(0, 0, Advice::Normal).map_err(wasi_error)?;
    let _ = root.is_same_object(&root);
    Ok(())
}

/// One bare `metadata-hash-at` on `path`, as `std::fs` makes before a `stat`.
fn metadata_hash(path: &str) -> std::io::Result<Value> {
    use wasip2::filesystem::types::PathFlags;
    let hash = workspace_root()?.metadata_hash_at(PathFlags::empty(), path).map_err(wasi_error)?;
    Ok(json!(hash.lower ^ hash.upper))
}

/// One `wasi:filesystem` call on the workspace root, the path as given (see the module's
/// documentation). `raw_rename` and `raw_link` go from `path` to `to`; `raw_symlink` makes the
/// link `path` with the target `to`.
fn raw_call(op: &str, path: &str, to: &str, content: &str) -> std::io::Result<Value> {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
    let root = workspace_root()?;
    let done = |result: Result<(), wasip2::filesystem::types::ErrorCode>| result.map(|()| json!(null)).map_err(wasi_error);
    match op {
        "raw_read" => {
            let file = root.open_at(PathFlags::SYMLINK_FOLLOW, path, OpenFlags::empty(), DescriptorFlags::READ).map_err(wasi_error)?;
            let (bytes, _) = file.read(65_536, 0).map_err(wasi_error)?;
            Ok(json!(String::from_utf8_lossy(&bytes)))
        }
        "raw_write" => {
            let flags = OpenFlags::CREATE | OpenFlags::TRUNCATE;
            let file = root.open_at(PathFlags::SYMLINK_FOLLOW, path, flags, DescriptorFlags::WRITE).map_err(wasi_error)?;
            file.write(content.as_bytes(), 0).map(|written| json!(written)).map_err(wasi_error)
        }
        "raw_stat" => root.stat_at(PathFlags::SYMLINK_FOLLOW, path).map(|stat| json!(stat.size)).map_err(wasi_error),
        // `toolcell:tool/listing` called on a descriptor this component holds: a directory, a
        // file (both opened for reading, which `list` does not govern), or the preopen root.
        "raw_list_all" | "raw_list_all_file" | "raw_list_all_preopen" => {
            let opened = match op {
                "raw_list_all_preopen" => None,
                "raw_list_all" => Some(OpenFlags::DIRECTORY),
                _ => Some(OpenFlags::empty()),
            }
            .map(|flags| root.open_at(PathFlags::SYMLINK_FOLLOW, path, flags, DescriptorFlags::READ))
            .transpose()
            .map_err(wasi_error)?;
            let listed = toolcell_sdk::bindings::toolcell::tool::listing::read_directory_entries(opened.as_ref().unwrap_or(&root))
                .map_err(wasi_error)?;
            Ok(json!(listed.names.split_terminator('\0').collect::<Vec<_>>()))
        }
        // The workspace root through the descriptor the host preopened, not one opened from it.
        "raw_list_preopen" => {
            let mut names = names_in(&root)?;
            names.sort();
            Ok(json!(names))
        }
        // Sorted here, and as the host's stream gives them.
        "raw_list" | "raw_list_order" => {
            let directory =
                root.open_at(PathFlags::SYMLINK_FOLLOW, path, OpenFlags::DIRECTORY, DescriptorFlags::READ).map_err(wasi_error)?;
            let mut names = names_in(&directory)?;
            if op == "raw_list" {
                names.sort();
            }
            Ok(json!(names))
        }
        "raw_mkdir" => done(root.create_directory_at(path)),
        "raw_remove" => done(root.unlink_file_at(path)),
        "raw_rmdir" => done(root.remove_directory_at(path)),
        "raw_rename" => done(root.rename_at(path, &root, to)),
        "raw_link" => done(root.link_at(PathFlags::empty(), path, &root, to)),
        "raw_symlink" => done(root.symlink_at(to, path)),
        "raw_touch" => {
            use wasip2::filesystem::types::NewTimestamp;
            let epoch = NewTimestamp::Timestamp(wasip2::clocks::wall_clock::Datetime { seconds: 0, nanoseconds: 0 });
            done(root.set_times_at(PathFlags::empty(), path, NewTimestamp::NoChange, epoch))
        }
        other => Err(std::io::Error::other(format!("unknown raw operation {other}"))),
    }
}

/// Ask for the preopened directories `count` times, holding every descriptor they give until
/// the call ends: the number of `.` descriptors held.
fn raw_preopens(count: usize) -> std::io::Result<Value> {
    PREOPENS.with(|held| {
        let mut held = held.borrow_mut();
        for _ in 0..count {
            for (descriptor, name) in wasip2::filesystem::preopens::get_directories() {
                if name == "." {
                    held.push(descriptor);
                }
            }
        }
        Ok(json!(held.len()))
    })
}

/// Open `path` for reading `count` times, each time keeping a stream of it and dropping the
/// descriptor: the number of streams held.
fn raw_stream_hold(path: &str, count: usize) -> std::io::Result<Value> {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
    let root = workspace_root()?;
    STREAMS.with(|held| {
        let mut held = held.borrow_mut();
        for _ in 0..count {
            let file = root.open_at(PathFlags::empty(), path, OpenFlags::empty(), DescriptorFlags::READ).map_err(wasi_error)?;
            held.push(file.read_via_stream(0).map_err(wasi_error)?);
        }
        Ok(json!(held.len()))
    })
}

/// A stream error as a string: its filesystem error code, or `closed`.
fn stream_error(error: &wasip2::io::streams::StreamError) -> String {
    match error {
        wasip2::io::streams::StreamError::Closed => "closed".to_owned(),
        wasip2::io::streams::StreamError::LastOperationFailed(error) => {
            format!("failed:{}", wasip2::filesystem::types::filesystem_error_code(error).map_or("none", |code| code.name()))
        }
    }
}

/// A script of raw `wasi:filesystem` and `wasi:io/streams` calls, steps separated by `;`,
/// each `name:argument`; each step's result is reported. `open:PATH,FLAGS` (`c` create, `t`
/// truncate, `e` exclusive, `r` read, `w` write, `d` directory) sets the file; `ws:OFFSET`,
/// `as`, `rs:OFFSET` make its write, append or read stream (`ws_root`, `rs_root` on the
/// preopen itself); `cw` check-write, `w:TEXT`, `wn:N` (N bytes `x` in one write), `bwf:TEXT`
/// blocking-write-and-flush, `wz:N` write-zeroes, `fl` flush, `bfl` blocking-flush, `r:N`,
/// `br:N`, `sk:N`; `dropfd`, `dropout`, `dropin`; `size` (stat of the file), `stat:PATH`
/// (stat-at on the root), `ls:DIR` (a listing of `DIR`: its number of entries),
/// `rl:PATH` (readlink-at), `rename:FROM>TO`, `link:FROM>TO`, `unlink:PATH`, `setsize:N`, `pw:OFFSET,TEXT` (a write
/// through the descriptor), `touch` (`set-times` through the descriptor: its modification time
/// to the epoch), `fail` (stop).
fn stream_script(script: &str) -> Value {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
    let Ok(root) = workspace_root() else {
        return json!(["no workspace"]);
    };
    let mut file: Option<wasip2::filesystem::types::Descriptor> = None;
    let mut output: Option<wasip2::io::streams::OutputStream> = None;
    let mut input: Option<wasip2::io::streams::InputStream> = None;
    let mut results = Vec::new();
    for step in script.split(';').filter(|step| !step.is_empty()) {
        let (name, argument) = step.split_once(':').unwrap_or((step, ""));
        let number = || argument.parse::<u64>().unwrap_or(0);
        let result: Value = match name {
            "open" => {
                let (path, flags) = argument.split_once(',').unwrap_or((argument, "r"));
                let mut open_flags = OpenFlags::empty();
                let mut descriptor_flags = DescriptorFlags::empty();
                for flag in flags.chars() {
                    match flag {
                        'c' => open_flags |= OpenFlags::CREATE,
                        't' => open_flags |= OpenFlags::TRUNCATE,
                        'e' => open_flags |= OpenFlags::EXCLUSIVE,
                        'd' => open_flags |= OpenFlags::DIRECTORY,
                        'r' => descriptor_flags |= DescriptorFlags::READ,
                        'w' => descriptor_flags |= DescriptorFlags::WRITE,
                        _ => {}
                    }
                }
                match root.open_at(PathFlags::empty(), path, open_flags, descriptor_flags) {
                    Ok(opened) => {
                        file = Some(opened);
                        json!("ok")
                    }
                    Err(code) => json!(code.name()),
                }
            }
            "ws" | "as" | "ws_root" => {
                let target = if name == "ws_root" { Some(&root) } else { file.as_ref() };
                let made = match (name, target) {
                    (_, None) => Err(None),
                    ("as", Some(target)) => target.append_via_stream().map_err(Some),
                    (_, Some(target)) => target.write_via_stream(number()).map_err(Some),
                };
                match made {
                    Ok(stream) => {
                        output = Some(stream);
                        json!("ok")
                    }
                    Err(code) => json!(code.map_or("no file", |code| code.name())),
                }
            }
            "rs" | "rs_root" => {
                let target = if name == "rs_root" { Some(&root) } else { file.as_ref() };
                match target.map(|target| target.read_via_stream(number())) {
                    Some(Ok(stream)) => {
                        input = Some(stream);
                        json!("ok")
                    }
                    Some(Err(code)) => json!(code.name()),
                    None => json!("no file"),
                }
            }
            "cw" | "w" | "wn" | "bwf" | "wz" | "fl" | "bfl" => {
                let Some(stream) = output.as_ref() else {
                    results.push(json!([step, "no output stream"]));
                    continue;
                };
                let done = match name {
                    "cw" => stream.check_write().map(|permit| json!(permit)),
                    "w" => stream.write(argument.as_bytes()).map(|()| json!("ok")),
                    "wn" => stream.write(&vec![b'x'; number() as usize]).map(|()| json!("ok")),
                    "bwf" => stream.blocking_write_and_flush(argument.as_bytes()).map(|()| json!("ok")),
                    "wz" => stream.write_zeroes(number()).map(|()| json!("ok")),
                    "fl" => stream.flush().map(|()| json!("ok")),
                    _ => stream.blocking_flush().map(|()| json!("ok")),
                };
                done.unwrap_or_else(|error| json!(stream_error(&error)))
            }
            "r" | "br" | "sk" => {
                let Some(stream) = input.as_ref() else {
                    results.push(json!([step, "no input stream"]));
                    continue;
                };
                let done = match name {
                    "r" => stream.read(number()).map(|bytes| json!(String::from_utf8_lossy(&bytes))),
                    "br" => stream.blocking_read(number()).map(|bytes| json!(String::from_utf8_lossy(&bytes))),
                    _ => stream.skip(number()).map(|skipped| json!(skipped)),
                };
                done.unwrap_or_else(|error| json!(stream_error(&error)))
            }
            "dropfd" => json!(file.take().is_some()),
            "dropout" => json!(output.take().is_some()),
            "dropin" => json!(input.take().is_some()),
            "size" => match file.as_ref().map(|file| file.stat()) {
                Some(Ok(stat)) => json!(stat.size),
                Some(Err(code)) => json!(code.name()),
                None => json!("no file"),
            },
            "touch" => {
                use wasip2::filesystem::types::NewTimestamp;
                let epoch = NewTimestamp::Timestamp(wasip2::clocks::wall_clock::Datetime { seconds: 0, nanoseconds: 0 });
                match file.as_ref().map(|file| file.set_times(NewTimestamp::NoChange, epoch)) {
                    Some(Ok(())) => json!("ok"),
                    Some(Err(code)) => json!(code.name()),
                    None => json!("no file"),
                }
            }
            "setsize" => match file.as_ref().map(|file| file.set_size(number())) {
                Some(Ok(())) => json!("ok"),
                Some(Err(code)) => json!(code.name()),
                None => json!("no file"),
            },
            "stat" => root.stat_at(PathFlags::empty(), argument).map(|stat| json!(stat.size)).unwrap_or_else(|code| json!(code.name())),
            "rename" => {
                let (from, to) = argument.split_once('>').unwrap_or((argument, ""));
                root.rename_at(from, &root, to).map(|()| json!("ok")).unwrap_or_else(|code| json!(code.name()))
            }
            "unlink" => root.unlink_file_at(argument).map(|()| json!("ok")).unwrap_or_else(|code| json!(code.name())),
            "rl" => root.readlink_at(argument).map(|target| json!(target)).unwrap_or_else(|code| json!(code.name())),
            "link" => {
                let (from, to) = argument.split_once('>').unwrap_or((argument, ""));
                root.link_at(PathFlags::empty(), from, &root, to).map(|()| json!("ok")).unwrap_or_else(|code| json!(code.name()))
            }
            "pw" => {
                let (offset, text) = argument.split_once(',').unwrap_or(("0", argument));
                match file.as_ref().map(|file| file.write(text.as_bytes(), offset.parse().unwrap_or(0))) {
                    Some(Ok(written)) => json!(written),
                    Some(Err(code)) => json!(code.name()),
                    None => json!("no file"),
                }
            }
            "ls" => root
                .open_at(PathFlags::empty(), argument, OpenFlags::DIRECTORY, DescriptorFlags::READ)
                .and_then(|directory| {
                    let entries = directory.read_directory()?;
                    let mut count = 0;
                    while entries.read_directory_entry()?.is_some() {
                        count += 1;
                    }
                    Ok(json!(count))
                })
                .unwrap_or_else(|code| json!(code.name())),
            "fail" => {
                results.push(json!([step, "stopping"]));
                break;
            }
            other => json!(format!("unknown step {other}")),
        };
        results.push(json!([step, result]));
    }
    json!(results)
}

/// List the directory behind handle `index`.
fn list_held(index: &str) -> std::io::Result<Value> {
    let index: usize = index.parse().map_err(|_| std::io::Error::other("not a handle number"))?;
    HELD.with(|held| {
        let held = held.borrow();
        let directory = held.get(index).ok_or_else(|| std::io::Error::other("no such handle"))?;
        let mut names = names_in(directory)?;
        names.sort();
        Ok(json!(names))
    })
}

/// The names in `directory`, in the order the host's stream gives them.
fn names_in(directory: &wasip2::filesystem::types::Descriptor) -> std::io::Result<Vec<String>> {
    let stream = directory.read_directory().map_err(wasi_error)?;
    let mut names = Vec::new();
    while let Some(entry) = stream.read_directory_entry().map_err(wasi_error)? {
        names.push(entry.name);
    }
    Ok(names)
}

/// `symlink(target, link)` from wasi-libc: std's `symlink_path` is unstable on WASI.
fn symlink(target: &str, link: &str) -> std::io::Result<()> {
    unsafe extern "C" {
        fn symlink(target: *const std::ffi::c_char, link: *const std::ffi::c_char) -> std::ffi::c_int;
    }
    let target = std::ffi::CString::new(target)?;
    let link = std::ffi::CString::new(link)?;
    // SAFETY: both arguments are NUL-terminated strings that outlive the call.
    let status = unsafe { symlink(target.as_ptr(), link.as_ptr()) };
    if status == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

toolcell_sdk::export_tool!(FsProbe);
