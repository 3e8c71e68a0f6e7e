//! Watch, store and writes, for any Kubernetes object: a reflected watch
//! whose objects come out only once the store has them (the relist
//! ordering), references to them for a work queue, and writes that do not
//! decode their answers.

use std::fmt::Debug;
use std::hash::Hash;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};

/// A reflected watch of `api`: its store, and a reference to every object
/// it applies, once the store has it ([`applied_once_stored`]).
/// `managedFields` are stripped before the store sees them (most of an
/// object's size, and no controller reads them); `modify` may strip more.
/// The watcher retries with backoff; its errors are logged as "watching
/// `what`". Nothing happens until the stream is polled.
pub fn reflected<K>(
    api: Api<K>,
    what: &'static str,
    modify: impl FnMut(&mut K) + Send + 'static,
) -> (Store<K>, impl Stream<Item = ObjectRef<K>> + Send + 'static)
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    reflected_observed(api, what, modify, |_, _| {})
}

/// [`reflected`], and `observe` sees each watch event, with the store, once
/// the store has applied it: a controller that keeps state of its own
/// beside the store (service-lb's records) learns of a Delete, or of a
/// relist's end, there.
pub fn reflected_observed<K>(
    api: Api<K>,
    what: &'static str,
    mut modify: impl FnMut(&mut K) + Send + 'static,
    mut observe: impl FnMut(&watcher::Event<K>, &Store<K>) + Send + 'static,
) -> (Store<K>, impl Stream<Item = ObjectRef<K>> + Send + 'static)
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let applied = store.clone();
    let objects = applied_once_stored(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(move |o: &mut K| {
                o.meta_mut().managed_fields = None;
                modify(o);
            })
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    observe(ev, &applied);
                }
            }),
    );
    (store, references(objects, what))
}

/// A write whose answer nobody reads. `build` makes the request from
/// `api`'s request builder (`|r| r.patch(…)`, `|r| r.create(…)`); `verb`
/// names it for kube's tracing, as kube's own methods name theirs. The
/// answer's status is checked (an error is the same `kube::Error` kube's
/// methods return); its body, the whole object as written, is not decoded.
/// Our writes come back through the watches anyway; not decoding them twice
/// took the controller's CPU over a 1,000-object `make bench-compare` run
/// from 1.49–1.58 s to 1.33–1.42 s.
pub async fn write_unread<K: kube::Resource + Clone>(
    api: &Api<K>,
    verb: &'static str,
    build: impl FnOnce(
        &kube::core::Request,
    ) -> Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> kube::Result<()> {
    write_text(api, verb, build).await.map(drop)
}

/// [`write_unread`], returning the answer's body undecoded, for a caller
/// that reads only a part of it.
pub async fn write_text<K: kube::Resource + Clone>(
    api: &Api<K>,
    verb: &'static str,
    build: impl FnOnce(
        &kube::core::Request,
    ) -> Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> kube::Result<String> {
    let mut req =
        build(&kube::core::Request::new(api.resource_url())).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert(verb);
    api.clone().into_client().request_text(req).await
}

/// The objects a reflected watch (`.reflect(writer)`) applies, each yielded
/// only once the store has it: a relist's objects (`InitApply`) are held
/// back until `InitDone`, when the reflector swaps them into the store.
///
/// kube's `applied_objects` yields them at once. A `Controller` then looks
/// each up in a store that does not have it yet (or has its version from
/// before the relist) and drops the trigger or reconciles the stale
/// version: an object created, changed or deleted while the watch was
/// broken (an apiserver restart, a `410 Gone`) was then not reconciled
/// until it changed again. (A fix that belongs in kube-runtime:
/// docs/architecture.md.)
pub fn applied_once_stored<K, E>(
    events: impl Stream<Item = Result<watcher::Event<K>, E>>,
) -> impl Stream<Item = Result<K, E>> {
    let mut relisted = Vec::new();
    events.flat_map(move |event| {
        let ready: Vec<Result<K, E>> = match event {
            Err(e) => vec![Err(e)],
            Ok(watcher::Event::Apply(obj)) => vec![Ok(obj)],
            Ok(watcher::Event::Init) => {
                relisted.clear();
                Vec::new()
            }
            Ok(watcher::Event::InitApply(obj)) => {
                relisted.push(obj);
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                std::mem::take(&mut relisted).into_iter().map(Ok).collect()
            }
            Ok(watcher::Event::Delete(_)) => Vec::new(),
        };
        futures::stream::iter(ready)
    })
}

/// References to the objects `objects` yields, for a work queue; a watch
/// error (the watcher retries with backoff) is logged and skipped.
pub fn references<K>(
    objects: impl Stream<Item = Result<K, watcher::Error>>,
    what: &'static str,
) -> impl Stream<Item = ObjectRef<K>>
where
    K: kube::Resource,
    K::DynamicType: Default,
{
    objects.filter_map(move |o| {
        std::future::ready(match o {
            Ok(o) => Some(ObjectRef::from_obj(&o)),
            Err(e) => {
                tracing::warn!(error = %e, "watching {what}");
                None
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;

    fn svc(name: &str, version: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_relists_objects_come_out_once_the_store_has_them() {
        use watcher::Event::*;
        let (store, writer) = reflector::store();
        let events = [
            Init,
            InitApply(svc("a", "1")),
            InitDone,
            // A relist: "a" changed and "b" appeared while the watch was
            // broken.
            Init,
            InitApply(svc("a", "2")),
            InitApply(svc("b", "3")),
            InitDone,
            Apply(svc("c", "4")),
            Delete(svc("a", "2")),
        ];
        let reflected = futures::stream::iter(events.map(Ok::<_, watcher::Error>)).reflect(writer);
        let mut out = std::pin::pin!(applied_once_stored(reflected));
        let mut seen = Vec::new();
        while let Some(obj) = out.next().await {
            let obj = obj.unwrap();
            let stored = store.get(&ObjectRef::from_obj(&obj));
            assert_eq!(
                stored.and_then(|s| s.metadata.resource_version.clone()),
                obj.metadata.resource_version,
                "{:?} yielded before the store had this version",
                obj.metadata.name
            );
            seen.push(format!(
                "{}@{}",
                obj.metadata.name.unwrap(),
                obj.metadata.resource_version.unwrap()
            ));
        }
        assert_eq!(seen, ["a@1", "a@2", "b@3", "c@4"]);
    }
}
