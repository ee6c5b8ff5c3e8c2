//! Reading the fields of a policy's JSON objects: required and optional strings, lists,
//! numbers, enums and booleans, globs and time zones, each problem recorded with its path.

use super::*;

impl Parser {
    pub(super) fn err(&mut self, path: impl Into<String>, msg: impl Into<String>) {
        self.errors.push(PolicyError {
            file: self.file.clone(),
            path: path.into(),
            message: msg.into(),
        });
    }

    /// Starts reading an object; reports unknown keys at once.
    pub(super) fn obj<'a>(
        &mut self,
        v: &'a Value,
        path: &str,
        what: &str,
        allowed: &'static [&'static str],
    ) -> Option<Obj<'a>> {
        let Some(map) = v.as_object() else {
            self.err(
                path,
                format!("expected {what} (an object), found {}", type_name(v)),
            );
            return None;
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let hint = suggest(key, allowed);
                self.err(
                    join(path, key),
                    format!(
                        "unknown key \"{key}\" in {what}{hint}; allowed keys: {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
        Some(Obj {
            map,
            path: path.to_string(),
            allowed,
        })
    }

    pub(super) fn req<'a>(&mut self, o: &Obj<'a>, key: &str) -> Option<&'a Value> {
        debug_assert!(o.allowed.contains(&key));
        match o.map.get(key) {
            Some(v) => Some(v),
            None => {
                self.err(o.path.clone(), format!("missing required key \"{key}\""));
                None
            }
        }
    }

    pub(super) fn str_value(&mut self, v: &Value, path: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.err(
                    path,
                    format!("expected a string, found {}", type_name(other)),
                );
                None
            }
        }
    }

    pub(super) fn req_str(&mut self, o: &Obj<'_>, key: &str) -> Option<String> {
        let v = self.req(o, key)?;
        self.str_value(v, &join(&o.path, key))
    }

    pub(super) fn opt_str(&mut self, o: &Obj<'_>, key: &str) -> Option<Option<String>> {
        match o.map.get(key) {
            None => Some(None),
            Some(v) => self.str_value(v, &join(&o.path, key)).map(Some),
        }
    }

    /// An optional string that, when present, must not be empty.
    pub(super) fn opt_non_empty_str(&mut self, o: &Obj<'_>, key: &str) -> Option<Option<String>> {
        let s = self.opt_str(o, key)?;
        if s.as_deref() == Some("") {
            self.err(join(&o.path, key), EMPTY_STRING);
            return None;
        }
        Some(s)
    }

    pub(super) fn non_empty_str(&mut self, o: &Obj<'_>, key: &str) -> Option<String> {
        let s = self.req_str(o, key)?;
        if s.is_empty() {
            self.err(join(&o.path, key), EMPTY_STRING);
            return None;
        }
        Some(s)
    }

    /// A dot path into tool args (`a.b.0.c`): no empty segment.
    pub(super) fn dot_path(&mut self, o: &Obj<'_>, key: &str) -> Option<String> {
        let p = self.non_empty_str(o, key)?;
        if p.split('.').any(str::is_empty) {
            self.err(
                join(&o.path, key),
                format!("\"{p}\" is not a dot path: segments must not be empty (e.g. \"order.items.0.sku\")"),
            );
            return None;
        }
        Some(p)
    }

    /// A list of strings (or, with `allow_single`, one string). Each string must be non-empty,
    /// as Handlebar's schema says (`z.string().min(1)`): an empty tag, slug or pattern never
    /// matches, so a rule holding one would silently never apply.
    pub(super) fn str_list(
        &mut self,
        v: &Value,
        path: &str,
        allow_single: bool,
    ) -> Option<Vec<String>> {
        self.str_list_of(v, path, allow_single, false)
    }

    /// [`Self::str_list`], with empty strings allowed when `empty_ok` (enduserTag
    /// `hasValueAny` values: Handlebar's schema allows them there).
    pub(super) fn str_list_of(
        &mut self,
        v: &Value,
        path: &str,
        allow_single: bool,
        empty_ok: bool,
    ) -> Option<Vec<String>> {
        match v {
            Value::String(s) if allow_single => {
                if s.is_empty() && !empty_ok {
                    self.err(path, EMPTY_STRING);
                    return None;
                }
                Some(vec![s.clone()])
            }
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match self.str_value(item, &idx(path, i)) {
                        Some(s) if s.is_empty() && !empty_ok => {
                            self.err(idx(path, i), EMPTY_STRING);
                            ok = false;
                        }
                        Some(s) => out.push(s),
                        None => ok = false,
                    }
                }
                ok.then_some(out)
            }
            other => {
                let want = if allow_single {
                    "a string or an array of strings"
                } else {
                    "an array of strings"
                };
                self.err(path, format!("expected {want}, found {}", type_name(other)));
                None
            }
        }
    }

    pub(super) fn req_str_list(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        allow_single: bool,
    ) -> Option<Vec<String>> {
        self.req_str_list_of(o, key, allow_single, false)
    }

    /// [`Self::req_str_list`], with empty strings allowed when `empty_ok`.
    pub(super) fn req_str_list_of(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        allow_single: bool,
        empty_ok: bool,
    ) -> Option<Vec<String>> {
        let v = self.req(o, key)?;
        let path = join(&o.path, key);
        let list = self.str_list_of(v, &path, allow_single, empty_ok)?;
        if list.is_empty() {
            self.err(path, "must not be empty");
            return None;
        }
        Some(list)
    }

    pub(super) fn opt_str_list(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        allow_single: bool,
    ) -> Option<Option<Vec<String>>> {
        match o.map.get(key) {
            None => Some(None),
            Some(v) => self
                .str_list(v, &join(&o.path, key), allow_single)
                .map(Some),
        }
    }

    pub(super) fn number(&mut self, o: &Obj<'_>, key: &str) -> Option<f64> {
        let v = self.req(o, key)?;
        match v.as_f64() {
            Some(n) => Some(n),
            None => {
                self.err(
                    join(&o.path, key),
                    format!("expected a number, found {}", type_name(v)),
                );
                None
            }
        }
    }

    pub(super) fn non_negative(&mut self, o: &Obj<'_>, key: &str) -> Option<f64> {
        let n = self.number(o, key)?;
        if n < 0.0 {
            self.err(
                join(&o.path, key),
                format!("must not be negative, found {n}"),
            );
            return None;
        }
        Some(n)
    }

    pub(super) fn count_value(&mut self, v: &Value, path: &str, min: u64) -> Option<u64> {
        let n = match v {
            Value::Number(n) => n,
            other => {
                self.err(
                    path,
                    format!("expected a whole number, found {}", type_name(other)),
                );
                return None;
            }
        };
        if let Some(u) = n.as_u64() {
            if u < min {
                self.err(path, format!("must be at least {min}, found {u}"));
                return None;
            }
            return Some(u);
        }
        match n.as_f64() {
            Some(f) if f < 0.0 => self.err(path, format!("must not be negative, found {n}")),
            _ => self.err(path, format!("expected a whole number, found {n}")),
        }
        None
    }

    pub(super) fn enum_value<T: Copy>(
        &mut self,
        v: &Value,
        path: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let names = || {
            choices
                .iter()
                .map(|(n, _)| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Value::String(s) = v else {
            self.err(
                path,
                format!("expected one of {}, found {}", names(), type_name(v)),
            );
            return None;
        };
        match choices.iter().find(|(n, _)| *n == s) {
            Some((_, t)) => Some(*t),
            None => {
                self.err(path, format!("\"{s}\" is not one of {}", names()));
                None
            }
        }
    }

    pub(super) fn req_enum<T: Copy>(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let v = self.req(o, key)?;
        self.enum_value(v, &join(&o.path, key), choices)
    }

    pub(super) fn opt_enum<T: Copy>(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        choices: &[(&str, T)],
    ) -> Option<Option<T>> {
        match o.map.get(key) {
            None => Some(None),
            Some(v) => self.enum_value(v, &join(&o.path, key), choices).map(Some),
        }
    }

    pub(super) fn opt_bool(&mut self, o: &Obj<'_>, key: &str) -> Option<Option<bool>> {
        match o.map.get(key) {
            None => Some(None),
            Some(Value::Bool(b)) => Some(Some(*b)),
            Some(other) => {
                self.err(
                    join(&o.path, key),
                    format!("expected true or false, found {}", type_name(other)),
                );
                None
            }
        }
    }

    pub(super) fn glob(&mut self, pattern: &str, path: &str) -> bool {
        // Validated in the form `compile` builds (lowercased), so that a glob accepted here
        // also compiles (`[Z-a]` is a valid range, `[z-a]` is not).
        match globset::GlobBuilder::new(&pattern.to_lowercase()).build() {
            Ok(_) => true,
            Err(e) => {
                self.err(path, format!("invalid glob \"{pattern}\": {}", e.kind()));
                false
            }
        }
    }

    pub(super) fn globs(&mut self, patterns: &[String], path: &str, single: bool) -> bool {
        let mut ok = true;
        for (i, p) in patterns.iter().enumerate() {
            let at = if single {
                path.to_string()
            } else {
                idx(path, i)
            };
            ok &= self.glob(p, &at);
        }
        ok
    }

    pub(super) fn timezone(&mut self, tz: &str, path: &str) -> bool {
        if tz.parse::<chrono_tz::Tz>().is_ok() {
            true
        } else {
            self.err(
                path,
                format!("\"{tz}\" is not a known IANA timezone (e.g. \"Europe/London\")"),
            );
            false
        }
    }
}
