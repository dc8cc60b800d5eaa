//! Push notifications (A2A §4.3): the config methods both bindings call
//! (`configs.rs`) and the deliveries that POST a task's updates to its
//! webhooks from the store (`delivery.rs`). The webhook itself
//! (`webhook.rs`) and the registry of deliveries (`state/pushes.rs`) sit
//! below, in what every request shares.

pub(crate) mod configs;
pub(crate) mod delivery;
