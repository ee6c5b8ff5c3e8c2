//! The metric, time, subject and signal conditions.

use super::*;

impl Parser {
    pub(super) fn metric_window(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a metricWindow condition",
            &[
                "kind",
                "scope",
                "metric",
                "aggregate",
                "windowSeconds",
                "op",
                "value",
                "filter",
                "onMissing",
            ],
        )?;
        let scope = self.req_enum(&o, "scope", SCOPES);
        let metric = self
            .req(&o, "metric")
            .and_then(|m| self.metric_ref(m, &join(path, "metric")));
        let aggregate = self.req_enum(
            &o,
            "aggregate",
            &[
                ("sum", Aggregate::Sum),
                ("avg", Aggregate::Avg),
                ("max", Aggregate::Max),
                ("min", Aggregate::Min),
                ("count", Aggregate::Count),
            ],
        );
        let window = match o.map.get("windowSeconds") {
            Some(w) => self
                .count_value(w, &join(path, "windowSeconds"), 1)
                .map(Some),
            None if matches!(scope, Some(Scope::Run)) => Some(None),
            None => {
                self.err(
                    join(path, "windowSeconds"),
                    "missing required key \"windowSeconds\": scopes \"agent\" and \"agent_user\" need a window (only scope \"run\" may omit it: then the run so far)",
                );
                None
            }
        };
        let op = self.req_enum(&o, "op", CMP_OPS);
        let value = self.number(&o, "value");
        let filter = match o.map.get("filter") {
            None => Some(None),
            Some(f) => {
                let fp = join(path, "filter");
                self.obj(f, &fp, "a metric filter", &["toolName", "toolTag"])
                    .and_then(|fo| {
                        let names = self.opt_str_list(&fo, "toolName", true)?;
                        if let Some(names) = &names {
                            let single = matches!(fo.map.get("toolName"), Some(Value::String(_)));
                            if !self.globs(names, &join(&fp, "toolName"), single) {
                                return None;
                            }
                        }
                        let tags = self.opt_str_list(&fo, "toolTag", true)?;
                        Some(Some(MetricFilter {
                            tool_name: names,
                            tool_tag: tags,
                        }))
                    })
            }
        };
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        Some(Condition::MetricWindow {
            scope: scope?,
            metric: metric?,
            aggregate: aggregate?,
            window_seconds: window?,
            op: op?,
            value: value?,
            filter: filter?,
            on_missing: on_missing?,
        })
    }

    pub(super) fn metric_ref(&mut self, v: &Value, path: &str) -> Option<MetricRef> {
        let o = self.obj(v, path, "a metric", &["kind", "key"])?;
        let kind = self.req_enum(&o, "kind", &[("inbuilt", true), ("custom", false)])?;
        let key = self.non_empty_str(&o, "key")?;
        if kind {
            match InbuiltMetric::from_key(&key) {
                Some(m) => Some(MetricRef::Inbuilt(m)),
                None => {
                    let names: Vec<&str> = InbuiltMetric::ALL.iter().map(|m| m.key()).collect();
                    self.err(
                        join(path, "key"),
                        format!("\"{key}\" is not an inbuilt metric; one of {} (or use kind \"custom\")", names.join(", ")),
                    );
                    None
                }
            }
        } else {
            Some(MetricRef::Custom(key))
        }
    }

    pub(super) fn time_gate(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a timeGate condition",
            &["kind", "timezone", "windows", "onMissing"],
        )?;
        let timezone = self
            .req(&o, "timezone")
            .and_then(|t| self.tz_source(t, &join(path, "timezone")));
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let windows = self.req(&o, "windows").and_then(|w| {
            let wp = join(path, "windows");
            let Value::Array(items) = w else {
                self.err(
                    wp,
                    format!("expected an array of windows, found {}", type_name(w)),
                );
                return None;
            };
            if items.is_empty() {
                self.err(wp, "must not be empty");
                return None;
            }
            let mut out = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                match self.window(item, &idx(&wp, i)) {
                    Some(w) => out.push(w),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        });
        Some(Condition::TimeGate {
            timezone: timezone?,
            windows: windows?,
            on_missing: on_missing?,
        })
    }

    pub(super) fn tz_source(&mut self, v: &Value, path: &str) -> Option<TimezoneSource> {
        let o = self.obj(
            v,
            path,
            "a timezone source",
            &["source", "tag", "fallback", "tz"],
        )?;
        let src = self.req_enum(&o, "source", &[("enduserTag", true), ("static", false)])?;
        if src {
            self.forbid(
                &o,
                "tz",
                "source \"enduserTag\" takes \"tag\" (and \"fallback\")",
            );
            let tag = self.non_empty_str(&o, "tag");
            let fallback = self.opt_enum(&o, "fallback", &[("org", ())]);
            Some(TimezoneSource::EnduserTag {
                tag: tag?,
                fallback_org: fallback?.is_some(),
            })
        } else {
            self.forbid(&o, "tag", "source \"static\" takes \"tz\"");
            self.forbid(&o, "fallback", "source \"static\" takes \"tz\"");
            let tz = self.req_str(&o, "tz")?;
            self.timezone(&tz, &join(path, "tz"))
                .then_some(TimezoneSource::Static { tz })
        }
    }

    pub(super) fn window(&mut self, v: &Value, path: &str) -> Option<TimeWindow> {
        let o = self.obj(v, path, "a time window", &["days", "start", "end"])?;
        let days = self.req_str_list(&o, "days", false).and_then(|days| {
            let mut out = Vec::new();
            let mut ok = true;
            for (i, d) in days.iter().enumerate() {
                match parse_day(d) {
                    Some(day) => out.push(day),
                    None => {
                        self.err(
                            idx(&join(path, "days"), i),
                            format!("\"{d}\" is not a day; use mon, tue, wed, thu, fri, sat, sun"),
                        );
                        ok = false;
                    }
                }
            }
            ok.then_some(out)
        });
        let mut time = |key: &str| {
            let s = self.req_str(&o, key)?;
            match TimeOfDay::parse(&s) {
                Some(t) => Some(t),
                None => {
                    self.err(
                        join(path, key),
                        format!("\"{s}\" is not HH:MM (00:00 to 24:00)"),
                    );
                    None
                }
            }
        };
        let start = time("start");
        let end = time("end");
        let (start, end) = (start?, end?);
        if start == end {
            self.err(
                path,
                format!("window start and end are both {start}: the window is empty"),
            );
            return None;
        }
        if start.0 == 1440 {
            self.err(join(path, "start"), "a window cannot start at 24:00");
            return None;
        }
        Some(TimeWindow {
            days: days?,
            start,
            end,
        })
    }

    pub(super) fn require_subject(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a requireSubject condition",
            &["kind", "subjectType", "idSystem", "role"],
        )?;
        let subject_type = self.non_empty_str(&o, "subjectType");
        let id_system = self.opt_non_empty_str(&o, "idSystem");
        let role = self.opt_non_empty_str(&o, "role");
        Some(Condition::RequireSubject(SubjectTest {
            subject_type: subject_type?,
            id_system: id_system?,
            role: role?,
        }))
    }

    pub(super) fn signal(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a signal condition",
            &["kind", "key", "args", "op", "value", "onMissing"],
        )?;
        let key = self.non_empty_str(&o, "key");
        let args = match o.map.get("args") {
            None => Some(BTreeMap::new()),
            Some(Value::Object(m)) => {
                let ap = join(path, "args");
                let mut out = BTreeMap::new();
                let mut ok = true;
                for (name, b) in m {
                    if name.is_empty() {
                        self.err(join(&ap, name), EMPTY_STRING);
                        ok = false;
                        continue;
                    }
                    match self.binding(b, &join(&ap, name)) {
                        Some(b) => {
                            out.insert(name.clone(), b);
                        }
                        None => ok = false,
                    }
                }
                ok.then_some(out)
            }
            Some(other) => {
                self.err(
                    join(path, "args"),
                    format!("expected an object of bindings, found {}", type_name(other)),
                );
                None
            }
        };
        let op = self.req_enum(
            &o,
            "op",
            &[
                ("eq", SignalOp::Eq),
                ("neq", SignalOp::Neq),
                ("gt", SignalOp::Gt),
                ("gte", SignalOp::Gte),
                ("lt", SignalOp::Lt),
                ("lte", SignalOp::Lte),
                ("in", SignalOp::In),
                ("nin", SignalOp::Nin),
            ],
        );
        let value = self.req(&o, "value").cloned();
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let (op, value) = (op?, value?);
        if matches!(op, SignalOp::In | SignalOp::Nin) {
            let is_array = match &value {
                Value::Array(_) => true,
                Value::String(s) => matches!(serde_json::from_str::<Value>(s), Ok(Value::Array(_))),
                _ => false,
            };
            if !is_array {
                self.err(
                    join(path, "value"),
                    format!(
                        "operator \"{}\" needs an array value, found {}",
                        op.as_str(),
                        type_name(&value)
                    ),
                );
                return None;
            }
        }
        Some(Condition::Signal {
            key: key?,
            args: args?,
            op,
            value,
            on_missing: on_missing?,
        })
    }

    pub(super) fn binding(&mut self, v: &Value, path: &str) -> Option<SignalBinding> {
        let o = self.obj(
            v,
            path,
            "a signal binding",
            &[
                "from",
                "tag",
                "path",
                "subjectType",
                "role",
                "field",
                "value",
            ],
        )?;
        let from = self.req_enum(
            &o,
            "from",
            &[
                ("enduserId", 0u8),
                ("enduserTag", 1),
                ("toolName", 2),
                ("toolTag", 3),
                ("toolArg", 4),
                ("subject", 5),
                ("const", 6),
            ],
        )?;
        let allowed: &[&str] = match from {
            0 | 2 => &["from"],
            1 | 3 => &["from", "tag"],
            4 => &["from", "path"],
            5 => &["from", "subjectType", "role", "field"],
            _ => &["from", "value"],
        };
        let mut ok = true;
        for key in o.map.keys() {
            if !allowed.contains(&key.as_str()) && o.allowed.contains(&key.as_str()) {
                self.err(
                    join(path, key),
                    format!(
                        "unexpected key \"{key}\" for a binding from \"{}\"",
                        o.map["from"].as_str().unwrap_or("")
                    ),
                );
                ok = false;
            }
        }
        let b = match from {
            0 => SignalBinding::EnduserId,
            1 => SignalBinding::EnduserTag(self.non_empty_str(&o, "tag")?),
            2 => SignalBinding::ToolName,
            3 => SignalBinding::ToolTag(self.non_empty_str(&o, "tag")?),
            4 => SignalBinding::ToolArg(self.dot_path(&o, "path")?),
            5 => {
                let subject_type = self.non_empty_str(&o, "subjectType");
                let role = self.opt_non_empty_str(&o, "role");
                let field = self.opt_enum(
                    &o,
                    "field",
                    &[
                        ("id", SubjectField::Id),
                        ("idSystem", SubjectField::IdSystem),
                    ],
                );
                SignalBinding::Subject {
                    subject_type: subject_type?,
                    role: role?,
                    field: field?.unwrap_or(SubjectField::Id),
                }
            }
            _ => SignalBinding::Const(self.req(&o, "value")?.clone()),
        };
        ok.then_some(b)
    }
}
