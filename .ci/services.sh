# --- services the tests need (sourced by .ci/run): Redis and PostgreSQL on loopback --------------
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then apt-get update -qq >/dev/null; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

echo "== services: Redis"
if ! command -v redis-server >/dev/null 2>&1; then apt_install redis-server redis-tools; fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
redis-cli -h 127.0.0.1 ping
export TOOLGATE_TEST_REDIS_URL="redis://127.0.0.1:6379/0"

echo "== services: PostgreSQL"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then apt_install postgresql; fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then apt_install postgresql; fi
  ver="$(ls /etc/postgresql | sort -V | tail -1)"
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
pg_isready -h 127.0.0.1 -p 5432
# A password works whether the cluster trusts loopback (this machine) or asks for one (a fresh install).
su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
su postgres -c "psql -q -tc \"SELECT 1 FROM pg_database WHERE datname='toolgate_ci'\"" | grep -q 1 \
  || su postgres -c "psql -q -c 'CREATE DATABASE toolgate_ci'" >/dev/null
export TOOLGATE_TEST_POSTGRES_URL="postgres://postgres:postgres@127.0.0.1:5432/toolgate_ci"
