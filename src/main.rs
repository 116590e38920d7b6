fn main() -> std::process::ExitCode {
    hopper::run()
}
