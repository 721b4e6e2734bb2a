fn main() -> std::process::ExitCode {
    outbox_check::cli::main()
}
