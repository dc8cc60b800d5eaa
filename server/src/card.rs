//! The agent card (`/.well-known/agent-card.json`), its cache headers, and
//! the extended card.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::agent::AgentDescription;
use crate::config::Config;

/// The cards, rendered once.
pub(crate) struct Cards {
    /// The public card as a v1.0 client asks for it (`A2A-Version: 1.0`):
    /// v1.0's members only.
    pub(crate) public: Rendered,
    /// The public card for a request without `A2A-Version` (a v0.3
    /// client's, §3.6.2): the same card with v0.3's members beside v1.0's
    /// ([`with_v03`]), so either version's client reads it.
    pub(crate) public_v03: Rendered,
    /// When it was rendered (the server's start), as an HTTP date.
    pub(crate) last_modified: String,
    /// The extended card's JSON, if one is configured.
    pub(crate) extended: Option<String>,
    /// The same, with v0.3's members (`agent/getAuthenticatedExtendedCard`).
    pub(crate) extended_v03: Option<String>,
}

/// A card's JSON and its entity tag (quoted, as the header carries it).
pub(crate) struct Rendered {
    pub(crate) json: String,
    pub(crate) etag: String,
}

impl Rendered {
    fn of(card: &Value) -> Self {
        let json = card.to_string();
        let etag = format!(
            "\"{}\"",
            hex::encode(&Sha256::digest(json.as_bytes())[..12])
        );
        Rendered { json, etag }
    }
}

impl Cards {
    pub(crate) fn new(config: &Config, agent: &AgentDescription, secured: bool) -> Self {
        let public = card(config, agent, secured);
        let public_v03 = match config.protocols.v0_3 {
            true => with_v03(config, public.clone()),
            false => public.clone(),
        };
        let extended_v03 = config
            .extended_card
            .as_ref()
            .map(|c| with_v03(config, c.clone()).to_string());
        Cards {
            public: Rendered::of(&public),
            public_v03: Rendered::of(&public_v03),
            last_modified: http_date(crate::error::now_ms() / 1000),
            extended: config.extended_card.as_ref().map(Value::to_string),
            extended_v03,
        }
    }
}

/// A v1.0 card with what a v0.3 client reads beside it: `url`,
/// `preferredTransport`, `protocolVersion`, `additionalInterfaces`,
/// `supportsAuthenticatedExtendedCard`, `security`, and the security
/// schemes in v0.3's form (`{"type": "http", "scheme": "bearer"}`, which
/// a2a-sdk 1.x's card reader also takes). v0.3 clients ignore v1.0's
/// members; v1.0 clients that ask with `A2A-Version: 1.0` get the card
/// without v0.3's.
fn with_v03(config: &Config, mut card: Value) -> Value {
    let base = config.public_url.trim_end_matches('/');
    let Value::Object(c) = &mut card else {
        return card;
    };
    let extended = c
        .get("capabilities")
        .and_then(|caps| caps.get("extendedAgentCard"))
        .and_then(Value::as_bool)
        .unwrap_or(config.extended_card.is_some());
    c.insert("url".into(), json!(format!("{base}/")));
    c.insert("preferredTransport".into(), json!("JSONRPC"));
    c.insert("protocolVersion".into(), json!("0.3.0"));
    c.insert(
        "additionalInterfaces".into(),
        json!([
            { "url": format!("{base}/"), "transport": "JSONRPC" },
            { "url": base, "transport": "HTTP+JSON" },
        ]),
    );
    c.insert("supportsAuthenticatedExtendedCard".into(), json!(extended));
    if let Some(Value::Object(schemes)) = c.get_mut("securitySchemes") {
        for scheme in schemes.values_mut() {
            if let Some(http) = scheme.get("httpAuthSecurityScheme").cloned() {
                let mut v03 = json!({ "type": "http" });
                for member in ["scheme", "description", "bearerFormat"] {
                    if let Some(v) = http.get(member) {
                        v03[member] = v.clone();
                    }
                }
                *scheme = v03;
            }
        }
        let names: Vec<String> = schemes.keys().cloned().collect();
        let security: Vec<Value> = names.iter().map(|n| json!({ n: [] })).collect();
        c.insert("security".into(), Value::Array(security));
    }
    card
}

/// An HTTP date (RFC 9110's IMF-fixdate) of `secs` since the Unix epoch.
pub(crate) fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // The ISO form says the date; the weekday counts from 1970-01-01, a
    // Thursday.
    let iso = ctxlog::time::iso8601_ms(secs * 1000);
    let field = |a: usize, b: usize| iso.get(a..b).unwrap_or("00");
    let month: usize = field(5, 7).parse().unwrap_or(1);
    format!(
        "{}, {} {} {} {}:{}:{} GMT",
        DAYS.get((secs / 86_400 % 7) as usize).unwrap_or(&"Thu"),
        field(8, 10),
        MONTHS.get(month.saturating_sub(1)).unwrap_or(&"Jan"),
        field(0, 4),
        field(11, 13),
        field(14, 16),
        field(17, 19)
    )
}

/// The public card: both bindings of each version served, streaming,
/// push notifications when they are served (`--push`), the extended card only when one is configured
/// (§3.3.4: an agent that declares it must answer
/// `ExtendedAgentCardNotConfigured` without one; one that does not must
/// answer `UnsupportedOperation`), and the bearer scheme when tokens are
/// configured.
fn card(config: &Config, agent: &AgentDescription, secured: bool) -> Value {
    let base = config.public_url.trim_end_matches('/');
    let mut interfaces = Vec::new();
    for (served, version) in [
        (config.protocols.v1_0, "1.0"),
        (config.protocols.v0_3, "0.3"),
    ] {
        if served {
            interfaces.push(json!({ "url": format!("{base}/"), "protocolBinding": "JSONRPC", "protocolVersion": version }));
            interfaces.push(
                json!({ "url": base, "protocolBinding": "HTTP+JSON", "protocolVersion": version }),
            );
        }
    }
    let mut card = json!({
        "name": agent.name,
        "description": agent.description,
        "supportedInterfaces": interfaces,
        "provider": { "organization": "ctxlog", "url": "https://github.com/ctxlog/ctxlog" },
        "version": agent.version,
        "capabilities": {
            "streaming": true,
            "pushNotifications": config.push.enabled,
            "extendedAgentCard": config.extended_card.is_some(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_are_imf_fixdates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(1_796_200_000), "Wed, 02 Dec 2026 08:26:40 GMT");
    }
}
