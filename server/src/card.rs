//! The agent card (`/.well-known/agent-card.json`), its cache headers, and
//! the extended card.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::agent::AgentDescription;
use crate::config::Config;

/// The cards, rendered once.
pub(crate) struct Cards {
    /// The public card's JSON.
    pub(crate) public: String,
    /// Its entity tag (quoted, as the header carries it).
    pub(crate) etag: String,
    /// The extended card's JSON, if one is configured.
    pub(crate) extended: Option<String>,
}

impl Cards {
    pub(crate) fn new(config: &Config, agent: &AgentDescription, secured: bool) -> Self {
        let public = card(config, agent, secured).to_string();
        let etag = format!(
            "\"{}\"",
            hex::encode(&Sha256::digest(public.as_bytes())[..12])
        );
        let extended = config.extended_card.as_ref().map(Value::to_string);
        Cards {
            public,
            etag,
            extended,
        }
    }
}

/// The public card: both interfaces (protocol version 1.0), streaming,
/// no push notifications, the extended-card operation (it answers
/// `ExtendedAgentCardNotConfigured` when none is configured, as §3.3.4
/// requires of an agent that declares it), and the bearer scheme when
/// tokens are configured.
fn card(config: &Config, agent: &AgentDescription, secured: bool) -> Value {
    let base = config.public_url.trim_end_matches('/');
    let mut card = json!({
        "name": agent.name,
        "description": agent.description,
        "supportedInterfaces": [
            { "url": format!("{base}/"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0" },
            { "url": base, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0" },
        ],
        "provider": { "organization": "ctxlog", "url": "https://github.com/ctxlog/ctxlog" },
        "version": agent.version,
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extendedAgentCard": true,
        },
        "defaultInputModes": agent.input_modes,
        "defaultOutputModes": agent.output_modes,
        "skills": agent.skills,
    });
    if secured {
        card["securitySchemes"] = json!({
            "bearer": { "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "A token the server's operator issued; it names your tenant",
            } }
        });
        card["securityRequirements"] = json!([{ "schemes": { "bearer": { "list": [] } } }]);
    }
    card
}
