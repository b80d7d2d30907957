//! `toolcell:tool/listing`: a directory's entries in one host call.
//!
//! It is `read-directory` and then `read-directory-entry` until the listing ends, made by the
//! host on the component's behalf through the same trait methods the component's own calls
//! reach: the guard judges and records it exactly as those calls (the role must be allowed to
//! list the directory, hidden entries are left out, each entry is spent from the call's budget
//! as one `read-directory-entry`). What it saves is a host call and a call back into the
//! component (to allocate the name) per entry: the names come back as one string.

use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{self, Descriptor, HostDescriptor, HostDirectoryEntryStream};
use wasmtime_wasi::p2::{FsError, FsResult};

mod generated {
    wasmtime::component::bindgen!({
        world: "listing-host",
        path: "../../wit",
        imports: { "toolcell:tool/listing.read-directory-entries": trappable },
        with: {
            "wasi:filesystem/types": wasmtime_wasi::p2::bindings::sync::filesystem::types,
            "wasi:io/error": wasmtime_wasi::p2::bindings::sync::io::error,
            "wasi:io/poll": wasmtime_wasi::p2::bindings::sync::io::poll,
            "wasi:io/streams": wasmtime_wasi::p2::bindings::sync::io::streams,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

pub(super) use generated::toolcell::tool::listing::{DirectoryEntries, Host, add_to_linker};

/// Every entry `read-directory` on `directory` gives, read through `host`'s own
/// `read-directory` and `read-directory-entry`: a name that is not UTF-8 (an entry's
/// `illegal-byte-sequence` error) is left out, any other error ends the listing with it.
fn read_directory_entries<H>(host: &mut H, directory: &Resource<Descriptor>) -> FsResult<DirectoryEntries>
where
    H: HostDescriptor + HostDirectoryEntryStream,
{
    let stream = HostDescriptor::read_directory(host, Resource::new_borrow(directory.rep()))?;
    let mut entries = DirectoryEntries { names: String::new(), types: Vec::new() };
    let read = loop {
        match HostDirectoryEntryStream::read_directory_entry(host, Resource::new_borrow(stream.rep())) {
            Ok(Some(entry)) => {
                entries.names.push_str(&entry.name);
                entries.names.push('\0');
                entries.types.push(entry.type_);
            }
            Ok(None) => break Ok(entries),
            Err(error) if matches!(error.downcast_ref(), Some(ErrorCode::IllegalByteSequence)) => {}
            Err(error) => break Err(error),
        }
    };
    HostDirectoryEntryStream::drop(host, stream).map_err(FsError::trap)?;
    read
}

/// [`read_directory_entries`] as the import answers it: the error as the component's error
/// code, or the trap that ends the call.
fn answer<H>(host: &mut H, directory: &Resource<Descriptor>) -> wasmtime::Result<Result<DirectoryEntries, types::ErrorCode>>
where
    H: HostDescriptor + HostDirectoryEntryStream + types::Host,
{
    match read_directory_entries(host, directory) {
        Ok(entries) => Ok(Ok(entries)),
        Err(error) => types::Host::convert_error_code(host, error).map(Err),
    }
}

impl Host for super::GuardedFilesystem<'_> {
    fn read_directory_entries(&mut self, directory: Resource<Descriptor>) -> wasmtime::Result<Result<DirectoryEntries, types::ErrorCode>> {
        answer(self, &directory)
    }
}

/// The benchmark's unguarded baseline (wasmtime-wasi linked directly) offers it too, so that
/// the same components run on it.
impl Host for wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_> {
    fn read_directory_entries(&mut self, directory: Resource<Descriptor>) -> wasmtime::Result<Result<DirectoryEntries, types::ErrorCode>> {
        answer(self, &directory)
    }
}
