import Config

config :oban_capture, ecto_repos: [ObanCapture.Repo]

config :oban_capture, ObanCapture.Repo,
  url: System.get_env("CAPTURE_URL", "postgresql://postgres@127.0.0.1:5432/oban_capture"),
  log: false,
  pool_size: 2

config :logger, level: :warning
