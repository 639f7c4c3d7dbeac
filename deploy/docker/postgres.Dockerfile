# PostgreSQL from Debian's package (postgresql-15) for compose.yaml's "postgres" profile: the database
# several obleth serve can share (docs/operations.md, "Several obleth serve on PostgreSQL"). It listens
# on a unix socket only, in the volume obleth-pgsocket that the obleth service mounts too (both images
# make /run/obleth-pg mode 1777, so whichever container creates the volume first, the server can
# put its socket there), and lets in
# the role obleth only from the operating-system user obleth (uid 10001, the obleth image's): peer
# authentication, no password anywhere.
ARG DEBIAN_IMAGE=debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN mkdir -p /etc/postgresql-common \
 && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
 && apt-get update -q \
 && apt-get install -y -q --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 obleth \
 && useradd --uid 10001 --gid obleth --no-create-home --shell /usr/sbin/nologin obleth \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -m 1777 /run/obleth-pg
COPY deploy/docker/postgres-entrypoint.sh /usr/local/bin/obleth-postgres
USER postgres
ENTRYPOINT ["/usr/local/bin/obleth-postgres"]
