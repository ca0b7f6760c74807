# Phalanx's image: docker build -t phalanx:0.1.0 .
# The wheel is built in a throwaway stage; the final image has the installed package and nothing else
# (no compiler, no build backend, no pip cache), and runs as an unprivileged user.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
COPY topology ./topology
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index /wheels/*.whl
# The methods the package's dataclasses generate, compiled once here as pip compiled its bytecode
# (scheduler/dataclass_cache.py): about 0.08 s less CPU at every start. An event loop is started too, as
# `run` starts one: anyio imports its backend's classes then.
RUN python -c "import anyio, scheduler.frontends.cli; anyio.run(anyio.sleep, 0)" \
    && python -m pip uninstall --yes pip
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["phalanx"]
CMD ["run"]
