//! What every running controller is handed: the Kubernetes and provider
//! clients, the shared Node cache, its name as field manager and event
//! reporter, and the metrics. Controller-specific state lives with each
//! controller.

use std::sync::Arc;

use ccm_provider_sdk::ProviderClient;
use kube::runtime::events::{Event, EventType, Reporter};

use ccm_runtime::events::{self, Delivery, EventSink, Recorder};
use kube::{Client, Resource};

use crate::k8s::node_store::NodeStore;
use crate::manager::metrics::ControllerMetrics;
use crate::providers::{Scope, ScopedProvider};

/// Settings and clients of one running controller.
pub struct Context {
    pub client: Client,
    pub provider: ProviderClient,
    pub nodes: NodeStore,
    pub cluster_name: String,
    pub events: EventSink,
    /// The field manager of this controller's writes.
    pub manager: &'static str,
    pub metrics: ControllerMetrics,
    /// Which Nodes and Services are this controller's provider's
    /// (everything, with one provider).
    pub scope: Scope,
}

impl Context {
    pub fn new(
        client: Client,
        provider: ScopedProvider,
        nodes: NodeStore,
        cluster_name: String,
        manager: &'static str,
        metrics: ControllerMetrics,
        delivery: Delivery,
    ) -> Arc<Self> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: manager.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let events = EventSink::new(
            recorder,
            delivery,
            events::QUEUE_CAPACITY,
            metrics.events_dropped.clone(),
        );
        Arc::new(Context {
            client,
            provider: provider.client,
            nodes,
            cluster_name,
            events,
            manager,
            metrics,
            scope: provider.scope,
        })
    }

    /// Patch parameters naming this controller as the field manager.
    pub fn patch_params(&self) -> kube::api::PatchParams {
        kube::api::PatchParams {
            field_manager: Some(self.manager.into()),
            ..Default::default()
        }
    }

    /// Hands an Event to this controller's [`EventSink`]; it never fails
    /// the caller.
    pub async fn event<K>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        self.events.send(ev, obj.object_ref(&())).await;
    }
}
