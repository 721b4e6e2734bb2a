# Runs Oban's migrations and the Basic engine's functions once each against an empty database,
# printing every query Ecto sends (its text, then its parameters) from Ecto's query telemetry,
# under the name of what sent it. docs/examples/oban/ holds what it printed.
defmodule ObanCapture.Repo do
  use Ecto.Repo, otp_app: :oban_capture, adapter: Ecto.Adapters.Postgres
end

defmodule ObanCapture.V01 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V01")
    Oban.Migration.up(version: 1)
  end

  def down, do: :ok
end

defmodule ObanCapture.V02 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V02")
    Oban.Migration.up(version: 2)
  end

  def down, do: :ok
end

defmodule ObanCapture.V03 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V03")
    Oban.Migration.up(version: 3)
  end

  def down, do: :ok
end

defmodule ObanCapture.V04 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V04")
    Oban.Migration.up(version: 4)
  end

  def down, do: :ok
end

defmodule ObanCapture.V05 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V05")
    Oban.Migration.up(version: 5)
  end

  def down, do: :ok
end

defmodule ObanCapture.V06 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V06")
    Oban.Migration.up(version: 6)
  end

  def down, do: :ok
end

defmodule ObanCapture.V07 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V07")
    Oban.Migration.up(version: 7)
  end

  def down, do: :ok
end

defmodule ObanCapture.V08 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V08")
    Oban.Migration.up(version: 8)
  end

  def down, do: :ok
end

defmodule ObanCapture.V09 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V09")
    Oban.Migration.up(version: 9)
  end

  def down, do: :ok
end

defmodule ObanCapture.V10 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V10")
    Oban.Migration.up(version: 10)
  end

  def down, do: :ok
end

defmodule ObanCapture.V11 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V11")
    Oban.Migration.up(version: 11)
  end

  def down, do: :ok
end

defmodule ObanCapture.V12 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V12")
    Oban.Migration.up(version: 12)
  end

  def down, do: :ok
end

defmodule ObanCapture.V13 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V13")
    Oban.Migration.up(version: 13)
  end

  def down, do: :ok
end

defmodule ObanCapture.V14 do
  use Ecto.Migration

  def up do
    IO.puts("==== OBAN MIGRATION V14")
    Oban.Migration.up(version: 14)
  end

  def down, do: :ok
end

defmodule ObanCapture do
  alias Oban.Engines.Basic

  def handle([:oban_capture, :repo, :query], _measurements, meta, _config) do
    IO.puts("---- QUERY #{Process.get(:label, "?")}")
    IO.puts(meta.query)
    IO.puts("---- PARAMS " <> inspect(meta.params, limit: :infinity, printable_limit: :infinity))
  end

  defp label(label), do: Process.put(:label, label)

  def run do
    :telemetry.attach("capture", [:oban_capture, :repo, :query], &__MODULE__.handle/4, nil)
    {:ok, _} = ObanCapture.Repo.start_link()

    migrations = for n <- 1..14, do: {n, Module.concat(ObanCapture, "V" <> String.pad_leading("#{n}", 2, "0"))}
    Ecto.Migrator.run(ObanCapture.Repo, migrations, :up, all: true, log: false)

    conf = Oban.Config.new(repo: ObanCapture.Repo, engine: Basic, node: "relay-a", queues: false, plugins: false, testing: :manual)
    {:ok, meta} = Basic.init(conf, queue: "default", limit: 1)

    label("enqueue")
    {:ok, _job} = Basic.insert_job(conf, Oban.Job.new(%{}, worker: "Outbox", queue: "default", max_attempts: 3), [])

    label("claim")
    {:ok, {_meta, [claimed]}} = Basic.fetch_jobs(conf, meta, %{})

    failed = %{claimed | unsaved_error: %{kind: :error, reason: %RuntimeError{message: "publication failed"}, stacktrace: []}}
    label("error_job")
    :ok = Basic.error_job(conf, failed, 17)

    label("stage")
    {:ok, _} = Basic.stage_jobs(conf, Oban.Job, limit: 5_000)

    label("complete_job")
    :ok = Basic.complete_job(conf, claimed)

    label("discard_job")
    :ok = Basic.discard_job(conf, failed)

    label("rescue")
    {:ok, _} = Basic.rescue_jobs(conf, Oban.Job, rescue_after: :timer.minutes(60))
  end
end
