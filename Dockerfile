# The image the Helm chart runs (deploy/charts/nodewright): `nodewright controller` and `nodewright worker`.
# Build from the repository root: docker build -t <registry>/nodewright:<version> .
#
# Two stages: the first installs the pinned dependencies of pyproject.toml (not the dev extras) and nodewright
# into a virtual environment and compiles every module to bytecode; the second is a clean slim Python with only
# that environment. The chart mounts the root filesystem read-only, so the bytecode is made here, checked by
# hash rather than timestamp so it stays valid whatever the layers do to file times.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/nodewright
WORKDIR /src
# Dependencies first, in a layer of their own: it is rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
    && /opt/nodewright/bin/pip install --no-compile --requirement requirements.txt
COPY core core
COPY activities activities
COPY workflows workflows
COPY workers workers
COPY simulator simulator
RUN /opt/nodewright/bin/pip install --no-compile --no-deps . \
    && /opt/nodewright/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/nodewright/lib

FROM python:3.11-slim
# The user the chart's securityContext expects (65532, as Karpenter's and distroless images use); HOME is /tmp,
# the chart's writable emptyDir.
RUN groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/nodewright /opt/nodewright
ENV PATH=/opt/nodewright/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["nodewright"]
