//! Key layout: `<prefix>:{<agentId>}:<kind>:…`, the agent id as Redis Cluster hash tag.

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

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// A `maxCalls` counter: `slot` identifies its definition, `scope` the run / agent / user.
    pub fn counter(&self, agent: &str, slot: u64, scope: &str) -> String {
        format!("{}:{}:c:{slot:016x}:{scope}", self.prefix, tag(agent))
    }

    /// A metric window.
    pub fn window(&self, agent: &str, slot: u64, scope: &str) -> String {
        format!("{}:{}:w:{slot:016x}:{scope}", self.prefix, tag(agent))
    }

    /// A run's history and flags.
    pub fn run(&self, agent: &str, run_id: &str) -> RunKeys {
        let t = tag(agent);
        RunKeys {
            history: format!("{}:{t}:h:{run_id}", self.prefix),
            flags: format!("{}:{t}:f:{run_id}", self.prefix),
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
    }
}
