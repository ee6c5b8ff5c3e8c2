//! The tool, argument, end-user, sequence and call-count conditions.

use super::*;

impl Parser {
    pub(super) fn tool_name(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(v, path, "a toolName condition", &["kind", "op", "value"])?;
        let op = self.req_enum(
            &o,
            "op",
            &[
                ("eq", 0),
                ("neq", 1),
                ("contains", 2),
                ("startsWith", 3),
                ("endsWith", 4),
                ("glob", 5),
                ("in", 6),
            ],
        )?;
        let sop = self.string_op(&o, op)?;
        if let StringOp::Glob(g) = &sop
            && !self.glob(g, &join(path, "value"))
        {
            return None;
        }
        Some(Condition::ToolName(sop))
    }

    /// Reads `value` for a string operator given by its index in
    /// eq, neq, contains, startsWith, endsWith, glob, in, regex.
    pub(super) fn string_op(&mut self, o: &Obj<'_>, op: u8) -> Option<StringOp> {
        let vp = join(&o.path, "value");
        let v = self.req(o, "value")?;
        if op == 6 {
            let Value::Array(_) = v else {
                self.err(
                    vp,
                    format!(
                        "operator \"in\" needs an array of strings, found {}",
                        type_name(v)
                    ),
                );
                return None;
            };
            return self.str_list(v, &vp, false).map(StringOp::In);
        }
        let s = self.str_value(v, &vp)?;
        if s.is_empty() {
            self.err(vp, EMPTY_STRING);
            return None;
        }
        Some(match op {
            0 => StringOp::Eq(s),
            1 => StringOp::Neq(s),
            2 => StringOp::Contains(s),
            3 => StringOp::StartsWith(s),
            4 => StringOp::EndsWith(s),
            5 => StringOp::Glob(s),
            _ => {
                if let Err(e) = regex::RegexBuilder::new(&s).size_limit(1 << 20).build() {
                    self.err(vp, format!("invalid regex: {}", last_line(&e.to_string())));
                    return None;
                }
                StringOp::Regex(s)
            }
        })
    }

    pub(super) fn tool_tag(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a toolTag condition",
            &["kind", "op", "tag", "tags"],
        )?;
        let op = self.req_enum(&o, "op", &[("has", 0u8), ("anyOf", 1), ("allOf", 2)])?;
        if op == 0 {
            self.forbid(&o, "tags", "op \"has\" takes \"tag\"");
            self.non_empty_str(&o, "tag")
                .map(|t| Condition::ToolTag(TagOp::Has(t)))
        } else {
            self.forbid(&o, "tag", "ops \"anyOf\"/\"allOf\" take \"tags\"");
            let tags = self.req_str_list(&o, "tags", false)?;
            Some(Condition::ToolTag(if op == 1 {
                TagOp::AnyOf(tags)
            } else {
                TagOp::AllOf(tags)
            }))
        }
    }

    pub(super) fn forbid(&mut self, o: &Obj<'_>, key: &str, why: &str) {
        if o.map.contains_key(key) {
            self.err(
                join(&o.path, key),
                format!("unexpected key \"{key}\": {why}"),
            );
        }
    }

    pub(super) fn tool_arg(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a toolArg condition",
            &["kind", "type", "op", "path", "value", "onMissing"],
        )?;
        if let Some(Value::String(op)) = o.map.get("op")
            && (op == "exists" || op == "notExists")
        {
            let why =
                "ops \"exists\"/\"notExists\" take only \"path\" (they are never missing data)";
            self.forbid(&o, "type", why);
            self.forbid(&o, "value", why);
            self.forbid(&o, "onMissing", why);
            let arg_path = self.dot_path(&o, "path")?;
            return Some(Condition::ToolArg {
                path: Some(arg_path),
                test: if op == "exists" {
                    ArgTest::Exists
                } else {
                    ArgTest::NotExists
                },
                on_missing: None,
            });
        }
        let arg_path = match o.map.get("path") {
            None => Some(None),
            Some(_) => self.dot_path(&o, "path").map(Some),
        };
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let ty = self.req_enum(
            &o,
            "type",
            &[("string", 0u8), ("number", 1), ("boolean", 2)],
        )?;
        let test = match ty {
            0 => {
                let op = self.req_enum(
                    &o,
                    "op",
                    &[
                        ("eq", 0),
                        ("neq", 1),
                        ("contains", 2),
                        ("startsWith", 3),
                        ("endsWith", 4),
                        ("in", 6),
                        ("regex", 7),
                    ],
                )?;
                ArgTest::String(self.string_op(&o, op)?)
            }
            1 => {
                let op = self.req_enum(&o, "op", CMP_OPS);
                let value = self.number(&o, "value");
                ArgTest::Number(op?, value?)
            }
            _ => {
                self.req_enum(&o, "op", &[("eq", ())])?;
                let v = self.req(&o, "value")?;
                let Value::Bool(b) = v else {
                    self.err(
                        join(path, "value"),
                        format!("expected true or false, found {}", type_name(v)),
                    );
                    return None;
                };
                ArgTest::Boolean(*b)
            }
        };
        Some(Condition::ToolArg {
            path: arg_path?,
            test,
            on_missing: on_missing?,
        })
    }

    pub(super) fn enduser_tag(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "an enduserTag condition",
            &["kind", "op", "tag", "value", "values"],
        )?;
        let op = self.req_enum(
            &o,
            "op",
            &[("has", 0u8), ("hasValue", 1), ("hasValueAny", 2)],
        )?;
        let tag = self.non_empty_str(&o, "tag");
        let op = match op {
            0 => {
                self.forbid(&o, "value", "op \"has\" takes only \"tag\"");
                self.forbid(&o, "values", "op \"has\" takes only \"tag\"");
                EnduserTagOp::Has { tag: tag? }
            }
            1 => {
                self.forbid(&o, "values", "op \"hasValue\" takes \"value\"");
                let value = self.req_str(&o, "value");
                EnduserTagOp::HasValue {
                    tag: tag?,
                    value: value?,
                }
            }
            _ => {
                self.forbid(&o, "value", "op \"hasValueAny\" takes \"values\"");
                let values = self.req_str_list_of(&o, "values", false, true);
                EnduserTagOp::HasValueAny {
                    tag: tag?,
                    values: values?,
                }
            }
        };
        Some(Condition::EnduserTag(op))
    }

    pub(super) fn execution_time(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "an executionTime condition",
            &["kind", "scope", "op", "ms", "onMissing"],
        )?;
        let scope = self.req_enum(
            &o,
            "scope",
            &[("tool", TimeScope::Tool), ("total", TimeScope::Total)],
        );
        let op = self.req_enum(&o, "op", CMP_OPS);
        let ms = self.non_negative(&o, "ms");
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        Some(Condition::ExecutionTime {
            scope: scope?,
            op: op?,
            ms: ms?,
            on_missing: on_missing?,
        })
    }

    pub(super) fn sequence(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a sequence condition",
            &["kind", "mustHaveCalled", "mustNotHaveCalled"],
        )?;
        let must = self.seq_list(&o, "mustHaveCalled");
        let must_not = self.seq_list(&o, "mustNotHaveCalled");
        let (must, must_not) = (must?, must_not?);
        if must.is_none() && must_not.is_none() {
            self.err(
                path,
                "a sequence needs \"mustHaveCalled\" or \"mustNotHaveCalled\" (or both)",
            );
            return None;
        }
        Some(Condition::Sequence {
            must_have_called: must,
            must_not_have_called: must_not,
        })
    }

    pub(super) fn seq_list(
        &mut self,
        o: &Obj<'_>,
        key: &str,
    ) -> Option<Option<Vec<SequenceEntry>>> {
        let Some(v) = o.map.get(key) else {
            return Some(None);
        };
        let lp = join(&o.path, key);
        let Value::Array(items) = v else {
            self.err(
                lp,
                format!(
                    "expected an array of globs or {{\"by\": \"toolTag\"}} entries, found {}",
                    type_name(v)
                ),
            );
            return None;
        };
        if items.is_empty() {
            self.err(lp, "must not be empty");
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let ip = idx(&lp, i);
            match item {
                Value::String(g) => {
                    ok &= self.glob(g, &ip);
                    out.push(SequenceEntry::Glob(g.clone()));
                }
                Value::Object(_) => {
                    let Some(eo) = self.obj(
                        item,
                        &ip,
                        "a sequence entry",
                        &["by", "tags", "op", "patterns"],
                    ) else {
                        ok = false;
                        continue;
                    };
                    let Some(by) =
                        self.req_enum(&eo, "by", &[("toolName", false), ("toolTag", true)])
                    else {
                        ok = false;
                        continue;
                    };
                    if !by {
                        self.forbid(&eo, "tags", "`by: toolName` takes \"patterns\"");
                        self.forbid(&eo, "op", "`by: toolName` takes \"patterns\"");
                        match self.req_str_list(&eo, "patterns", false) {
                            Some(p) if self.globs(&p, &join(&ip, "patterns"), false) => {
                                out.push(SequenceEntry::Names(p))
                            }
                            _ => ok = false,
                        }
                        continue;
                    }
                    self.forbid(&eo, "patterns", "`by: toolTag` takes \"tags\"");
                    let by = Some(());
                    let tags = self.req_str_list(&eo, "tags", false);
                    let all = self.opt_enum(&eo, "op", &[("anyOf", false), ("allOf", true)]);
                    match (by, tags, all) {
                        (Some(()), Some(tags), Some(all)) => out.push(SequenceEntry::Tags {
                            tags,
                            all: all.unwrap_or(false),
                        }),
                        _ => ok = false,
                    }
                }
                other => {
                    self.err(
                        ip,
                        format!(
                            "expected a glob string or a {{\"by\": \"toolTag\"}} object, found {}",
                            type_name(other)
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(Some(out))
    }

    pub(super) fn max_calls(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a maxCalls condition",
            &[
                "kind",
                "selector",
                "max",
                "windowSeconds",
                "per",
                "tagFilter",
            ],
        )?;
        let selector = self
            .req(&o, "selector")
            .and_then(|s| self.call_selector(s, &join(path, "selector")));
        let max = self
            .req(&o, "max")
            .and_then(|m| self.count_value(m, &join(path, "max"), 0));
        let window_seconds = match o.map.get("windowSeconds") {
            None => Some(None),
            Some(w) => self
                .count_value(w, &join(path, "windowSeconds"), 1)
                .map(Some),
        };
        let per = self.opt_enum(&o, "per", SCOPES);
        let tag_filter = match o.map.get("tagFilter") {
            None => Some(None),
            Some(_) => self.req_str_list(&o, "tagFilter", false).map(Some),
        };
        Some(Condition::MaxCalls {
            tag_filter: tag_filter?,
            selector: selector?,
            max: max?,
            window_seconds: window_seconds?,
            per: per?,
        })
    }

    pub(super) fn call_selector(&mut self, v: &Value, path: &str) -> Option<CallSelector> {
        let o = self.obj(v, path, "a maxCalls selector", &["by", "patterns", "tags"])?;
        let by = self.req_enum(&o, "by", &[("toolName", 0u8), ("toolTag", 1)])?;
        if by == 0 {
            self.forbid(&o, "tags", "`by: toolName` takes \"patterns\"");
            let patterns = self.req_str_list(&o, "patterns", false)?;
            self.globs(&patterns, &join(path, "patterns"), false)
                .then_some(CallSelector::ToolName(patterns))
        } else {
            self.forbid(&o, "patterns", "`by: toolTag` takes \"tags\"");
            self.req_str_list(&o, "tags", false)
                .map(CallSelector::ToolTag)
        }
    }
}
