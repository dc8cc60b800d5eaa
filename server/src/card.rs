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
    /// When it was rendered (the server's start), as an HTTP date.
    pub(crate) last_modified: String,
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
            last_modified: http_date(crate::error::now_ms() / 1000),
            extended,
        }
    }
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

/// The public card: both interfaces (protocol version 1.0), streaming,
/// push notifications when they are served (`--push`), the extended card only when one is configured
/// (§3.3.4: an agent that declares it must answer
/// `ExtendedAgentCardNotConfigured` without one; one that does not must
/// answer `UnsupportedOperation`), and the bearer scheme when tokens are
/// configured.
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
