# Records the SQL Oban sends PostgreSQL, for docs/examples/oban/. Not part of outbox-check's
# build or tests: run by hand where Elixir (1.15 or later) and Hex are installed, see README.md.
defmodule ObanCapture.MixProject do
  use Mix.Project

  def project, do: [app: :oban_capture, version: "0.1.0", elixir: "~> 1.15", deps: deps()]

  def application, do: [extra_applications: [:logger]]

  # The versions oban-bg/oban 2939e31's mix.lock names (Postgrex: 0.22.2 was recorded).
  defp deps do
    [
      {:oban, github: "oban-bg/oban", ref: "2939e3134d0812195fbfcfe9a8e8d4bbd30bb23b"},
      {:ecto, "3.14.1", override: true},
      {:ecto_sql, "3.14.0", override: true},
      {:postgrex, "0.22.2", override: true},
      {:jason, "1.4.5", override: true}
    ]
  end
end
