//! `toolgate keygen`.
use std::path::PathBuf;
use std::process::ExitCode;

use crate::audit::RunSigner;

/// The long help of `toolgate keygen`.
pub const LONG_ABOUT: &str = "Make an Ed25519 key pair for signing audit trails.\n\n\
Writes the private key to KEY (PKCS#8 PEM, readable by its owner only) and the public key to KEY.pub \
(PEM). Never overwrites a file. Give the private key to the commands that write trails \
(`--signing-key KEY`) and the public key to `toolgate verify --public-key KEY.pub`. Prints the key id \
that signed events carry in `keyId`.\n\n\
Exit status: 0 on success, 2 when a file cannot be written (or already exists).";

/// Arguments of `toolgate keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Where to write the private key; the public key goes to this path plus `.pub`.
    #[arg(long, value_name = "KEY")]
    pub out: PathBuf,
}

/// Runs `toolgate keygen`.
pub fn run(args: KeygenArgs) -> ExitCode {
    let signer = RunSigner::generate();
    match signer.write_files(&args.out) {
        Ok(public) => {
            outln!(
                "{}: private key\n{}: public key\nkeyId {}",
                args.out.display(),
                public.display(),
                signer.key_id()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
