//! Key layout: `<prefix>:{<agentId>}:<kind>:…`, the agent id as Redis Cluster hash tag.
//!
//! Injective: the agent id is escaped inside the tag (`%`, `{`, `}`), and a scope or run id
//! at the end of a key is escaped so that it never contains `|` (`%` → `%25`, `|` → `%7C`):
//! the scripts derive a window's companion keys by appending `|v` and `|a`, so an id ending in
//! `|a` must not turn one user's window into another's sum.

/// Builds this store's keys.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// The keys of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKeys {
    /// The run's tool history (a list).
    pub history: String,
    /// The run's flags (a hash: `paused`, `aborted`).
    pub flags: String,
    /// The run's audit chain head (a hash: `seq`, `hash`, `owner`, `ended`).
    pub chain: String,
    /// The run's lease (a string: the holder's token, expiring by the server's clock).
    pub lease: String,
}

/// `{` and `}` would end the hash tag early and `%` is the escape itself.
fn tag(agent: &str) -> String {
    let mut s = String::with_capacity(agent.len() + 2);
    s.push('{');
    for ch in agent.chars() {
        match ch {
            '%' => s.push_str("%25"),
            '{' => s.push_str("%7B"),
            '}' => s.push_str("%7D"),
            c => s.push(c),
        }
    }
    s.push('}');
    s
}

/// `id` with `%` and `|` escaped (see the module's doc).
fn tail(id: &str) -> std::borrow::Cow<'_, str> {
    if !id.contains(['%', '|']) {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut s = String::with_capacity(id.len() + 8);
    for ch in id.chars() {
        match ch {
            '%' => s.push_str("%25"),
            '|' => s.push_str("%7C"),
            c => s.push(c),
        }
    }
    std::borrow::Cow::Owned(s)
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// A `maxCalls` counter: `slot` identifies its definition, `scope` the run / agent / user.
    pub fn counter(&self, agent: &str, slot: u64, scope: &str) -> String {
        format!(
            "{}:{}:c:{slot:016x}:{}",
            self.prefix,
            tag(agent),
            tail(scope)
        )
    }

    /// A metric window.
    pub fn window(&self, agent: &str, slot: u64, scope: &str) -> String {
        format!(
            "{}:{}:w:{slot:016x}:{}",
            self.prefix,
            tag(agent),
            tail(scope)
        )
    }

    /// The current-run record of `key` (a caller without a run id of its own).
    pub fn current_run(&self, agent: &str, key: &str) -> String {
        format!("{}:{}:t:{}", self.prefix, tag(agent), tail(key))
    }

    /// The prefix's loss marker: the server time (ms) at which a process found that Redis had
    /// lost toolgate's state; present until `toolgate state rearm` removes it.
    pub fn lost(&self) -> String {
        format!("{}:lost", self.prefix)
    }

    /// The prefix's re-arm log: a list of what `toolgate state rearm` did (newest first).
    pub fn rearms(&self) -> String {
        format!("{}:rearms", self.prefix)
    }

    /// The prefix's epoch.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    /// A run's history and flags.
    pub fn run(&self, agent: &str, run_id: &str) -> RunKeys {
        let t = tag(agent);
        let run_id = tail(run_id);
        RunKeys {
            history: format!("{}:{t}:h:{run_id}", self.prefix),
            flags: format!("{}:{t}:f:{run_id}", self.prefix),
            chain: format!("{}:{t}:a:{run_id}", self.prefix),
            lease: format!("{}:{t}:l:{run_id}", self.prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_is_the_hash_tag_and_cannot_break_it() {
        let k = Keys::new("tg");
        assert_eq!(k.counter("a", 1, "r"), "tg:{a}:c:0000000000000001:r");
        assert_eq!(k.run("x}y", "r1").history, "tg:{x%7Dy}:h:r1");
        assert_ne!(k.counter("a%7D", 1, "r"), k.counter("a}", 1, "r"));
        assert_eq!(k.window("a", 1, "u|a"), "tg:{a}:w:0000000000000001:u%7Ca");
        assert_ne!(
            k.window("a", 1, "u|a"),
            format!("{}|a", k.window("a", 1, "u"))
        );
    }
}
