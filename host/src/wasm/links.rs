//! Symbolic links a tool may create inside its granted directories.
//!
//! WASI lets a tool with a writable directory create a symbolic link whose
//! target is any text. The tool itself cannot follow a link out of its
//! grant, but anything on the host that later reads the directory (an
//! operator, a backup, another program) can. So the host refuses, with
//! `not-permitted`, every link whose target is absolute or climbs with
//! `..`: a relative target without `..` names a path inside the directory
//! that holds the link, and so inside the grant (a link through another
//! link is held to the same rule when that one is made). Targets with
//! `..` that would stay inside are refused too: the host does not know
//! where in the grant the link's directory lies.

use super::HostState;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{ErrorCode, Host, HostDescriptor};

/// The WASI filesystem interface whose `symlink-at` is replaced.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Whether a link to `target` could point outside the directory tree it
/// is made in.
pub fn leaves_its_tree(target: &str) -> bool {
    target.starts_with('/') || target.is_empty() || target.split('/').any(|c| c == "..")
}

/// Replaces WASI's `symlink-at` in `linker` (after WASI was added) by one
/// that refuses links that could leave the grant, and makes the others as
/// WASI does.
pub fn refuse_escaping_links(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store, (fd, target, link): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                if leaves_its_tree(&target) {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let mut fs = store.data_mut().filesystem();
                match HostDescriptor::symlink_at(&mut fs, fd, target, link).await {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => Ok((Err(Host::convert_error_code(&mut fs, e)?),)),
                }
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::leaves_its_tree;

    #[test]
    fn absolute_and_climbing_targets_leave_the_tree() {
        for t in ["/etc/passwd", "../x", "a/../../x", "a/..", "", ".."] {
            assert!(leaves_its_tree(t), "{t}");
        }
        for t in ["a.txt", "sub/a.txt", "./a", "a..b", "...", ".hidden"] {
            assert!(!leaves_its_tree(t), "{t}");
        }
    }
}
