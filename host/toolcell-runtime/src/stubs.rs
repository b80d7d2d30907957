//! Imports outside the `tool-component` world that a component may link as inert stubs, when
//! the policy opts the tool in by name (`[plugins.NAME] stub_imports = ["wasi:sockets/*"]`).
//!
//! Interpreted languages' runtimes import interfaces their tools never call (CPython's socket
//! module imports `wasi:sockets`). A stub grants nothing: every function refuses, audited
//! like any refusal (which fails the call), and answers the component with the error its type
//! allows (`access-denied`, `not-supported`) or, where its type has none, a trap. Resources are
//! opaque and never made. Every other component is refused at load, naming the import, as
//! before; the stubs are linked only into the opted-in component's own linker.

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceType, Type, Val};
use wasmtime::{Engine, StoreContextMut};

use crate::capabilities::CallState;
use crate::error::{Error, describe};

/// The host type standing for every stubbed resource: none is ever made.
struct StubResource;

/// Define every function and resource of `imports` (imports of `component`) as a stub in
/// `linker`.
pub(crate) fn define(linker: &mut Linker<CallState>, engine: &Engine, component: &Component, imports: &[String]) -> Result<(), Error> {
    let link = |error: wasmtime::Error| Error::Engine { reason: format!("cannot link the stubbed imports: {}", describe(&error)) };
    // Resources the real interfaces define (`wasi:io/poll`'s `pollable`, which `wasi:sockets`
    // uses): the host's own, never redefined.
    let mut linked_resources = Vec::new();
    for (name, import) in component.component_type().imports(engine) {
        if let ComponentItem::ComponentInstance(instance) = import.ty
            && !imports.iter().any(|stubbed| stubbed == name)
        {
            linked_resources.extend(instance.exports(engine).filter_map(|(_, item)| match item.ty {
                ComponentItem::Resource(resource) => Some(resource),
                _ => None,
            }));
        }
    }
    for (name, import) in component.component_type().imports(engine) {
        if !imports.iter().any(|stubbed| stubbed == name) {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = import.ty else {
            continue;
        };
        let mut linked = linker.instance(name).map_err(link)?;
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => {
                    let subject = format!("{name}#{export}");
                    linked.func_new(export, move |store, ty, _params, results| refuse(store, &subject, &ty, results)).map_err(link)?;
                }
                ComponentItem::Resource(resource) if !linked_resources.contains(&resource) => {
                    linked.resource(export, ResourceType::host::<StubResource>(), |_, _| Ok(())).map_err(link)?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A stubbed function was called: refuse and audit it, and answer with an error value where
/// the function's type has one.
fn refuse(
    mut store: StoreContextMut<'_, CallState>,
    subject: &str,
    ty: &wasmtime::component::types::ComponentFunc,
    results: &mut [Val],
) -> wasmtime::Result<()> {
    let message = format!(
        "`{subject}` is linked as a stub: toolcell grants tools no such capability (the policy lets this tool link it only so that it loads)"
    );
    let state = store.data_mut();
    state.guard.refuse_capability("stub-import", subject, "stub-import", message.clone());
    if let Some(flood) = state.guard.flooded() {
        wasmtime::bail!("{flood}");
    }
    let result_type = ty.results().next();
    if let (Some(slot), Some(Type::Result(result))) = (results.first_mut(), result_type)
        && let Some(Type::Enum(codes)) = result.err()
    {
        let names: Vec<&str> = codes.names().collect();
        if let Some(code) = ["access-denied", "not-supported", "permission-denied"].into_iter().find(|code| names.contains(code)) {
            *slot = Val::Result(Err(Some(Box::new(Val::Enum(code.to_owned())))));
            return Ok(());
        }
    }
    wasmtime::bail!("{message}")
}
