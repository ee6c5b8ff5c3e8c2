//! The parts of a `sensitiveData` condition: detectors and their sub-conditions.

use std::fmt;

/// A `sensitiveData` detector (see docs/policy-language.md for each one's exact rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Detector {
    /// An e-mail address.
    Email,
    /// An e-mail address, filtered by its domain or TLD.
    EmailDomain,
    /// A phone number (E.164 or a common national form).
    Phone,
    /// A Luhn-valid Visa, Mastercard, Amex or Discover card number.
    CreditCard,
    /// A mod-97-valid IBAN.
    Iban,
    /// A UK National Insurance number.
    UkNino,
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// An http or https URL.
    Url,
    /// A JSON Web Token whose header decodes and names an `alg`.
    Jwt,
    /// A PEM private key block.
    PrivateKey,
    /// An API key: a known prefix, or a long high-entropy token.
    SecretKey,
}

impl Detector {
    /// Every detector, in declaration order.
    pub const ALL: [Detector; 11] = [
        Detector::Email,
        Detector::EmailDomain,
        Detector::Phone,
        Detector::CreditCard,
        Detector::Iban,
        Detector::UkNino,
        Detector::IpAddress,
        Detector::Url,
        Detector::Jwt,
        Detector::PrivateKey,
        Detector::SecretKey,
    ];

    /// The JSON spelling, e.g. `credit_card`.
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::Email => "email",
            Detector::EmailDomain => "email_domain",
            Detector::Phone => "phone",
            Detector::CreditCard => "credit_card",
            Detector::Iban => "iban",
            Detector::UkNino => "uk_nino",
            Detector::IpAddress => "ip_address",
            Detector::Url => "url",
            Detector::Jwt => "jwt",
            Detector::PrivateKey => "private_key",
            Detector::SecretKey => "secret_key",
        }
    }

    /// The detector of this JSON spelling.
    pub fn from_name(s: &str) -> Option<Detector> {
        Detector::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The sub-condition checks this detector accepts.
    pub fn checks(self) -> &'static [SubCheck] {
        match self {
            Detector::EmailDomain => &[SubCheck::Domain, SubCheck::Tld],
            Detector::Url => &[SubCheck::Scheme, SubCheck::Domain, SubCheck::Tld],
            _ => &[],
        }
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a sub-condition looks at in a detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubCheck {
    /// The host (URL) or the part after `@` (e-mail).
    Domain,
    /// The last label of the domain.
    Tld,
    /// The URL's scheme (`http` or `https`).
    Scheme,
}

impl SubCheck {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SubCheck::Domain => "domain",
            SubCheck::Tld => "tld",
            SubCheck::Scheme => "scheme",
        }
    }
}

/// A sub-condition's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubOp {
    /// Equal (case-insensitive).
    Eq,
    /// Not equal.
    Neq,
    /// Ends with (domain only).
    EndsWith,
    /// One of a list.
    In,
}

impl SubOp {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SubOp::Eq => "eq",
            SubOp::Neq => "neq",
            SubOp::EndsWith => "endsWith",
            SubOp::In => "in",
        }
    }
}

/// A sub-condition's value: one string or a non-empty list (`in` needs a list).
#[derive(Debug, Clone, PartialEq)]
pub enum SubValue {
    /// One string.
    One(String),
    /// A list of strings.
    List(Vec<String>),
}

impl SubValue {
    /// The strings, one or many.
    pub fn values(&self) -> &[String] {
        match self {
            SubValue::One(s) => std::slice::from_ref(s),
            SubValue::List(v) => v,
        }
    }
}

/// Filters the detections of `email_domain` and `url`.
#[derive(Debug, Clone, PartialEq)]
pub struct SubCondition {
    /// What is checked.
    pub check: SubCheck,
    /// How.
    pub op: SubOp,
    /// Against what.
    pub value: SubValue,
}

/// One entry of a `sensitiveData` condition's `detectors`.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorEntry {
    /// The detector.
    pub detector: Detector,
    /// Which of its detections count (all when absent).
    pub sub_condition: Option<SubCondition>,
}

/// What a `sensitiveData` condition scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SensitiveTarget {
    /// The call's arguments (Handlebar's `toolArg`).
    #[default]
    ToolArg,
    /// The tool's result, in the after phase (`toolOutput`: a toolgate extension; Handlebar's
    /// schema says it will come).
    ToolOutput,
    /// The messages sent to a model, in an `llm.before` rule (`llmInput`: a toolgate
    /// extension): every string of the messages is scanned.
    LlmInput,
}

impl SensitiveTarget {
    /// The name as written in a policy.
    pub fn as_str(self) -> &'static str {
        match self {
            SensitiveTarget::ToolArg => "toolArg",
            SensitiveTarget::ToolOutput => "toolOutput",
            SensitiveTarget::LlmInput => "llmInput",
        }
    }
}
