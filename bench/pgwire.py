# bench/pgwire.py: a minimal PostgreSQL client (simple-query protocol over a unix socket, trust
# authentication only) for the benchmark driver, so that bench/run needs nothing beyond the Python
# standard library. It talks only to the throwaway cluster bench/run starts itself; it is not a
# general-purpose driver (no TLS, no passwords, no extended protocol, text results only).
"""Minimal PostgreSQL simple-query client for the benchmark (stdlib only)."""

import socket
import struct


class PgError(Exception):
    """An ErrorResponse from the server (or a protocol problem)."""

    def __init__(self, fields):
        self.fields = fields
        self.sqlstate = fields.get("C", "")
        super().__init__(f"{fields.get('S', 'ERROR')}: {fields.get('M', '?')} (SQLSTATE {self.sqlstate})")


class Result:
    """One statement's outcome: column names, rows (lists of str or None) and the command tag."""

    def __init__(self):
        self.columns = []
        self.rows = []
        self.tag = ""

    @property
    def affected(self):
        """The row count of an INSERT/UPDATE/DELETE/SELECT tag (last number in the tag)."""
        parts = self.tag.split()
        return int(parts[-1]) if parts and parts[-1].isdigit() else 0


def parse_conninfo(conninfo):
    """Parse `key=value key=value` (no quoting needed: bench/run builds these itself)."""
    out = {}
    for item in conninfo.split():
        key, _, value = item.partition("=")
        out[key] = value
    return out


class Connection:
    """One session, in autocommit (each simple query is its own transaction unless it says BEGIN)."""

    def __init__(self, conninfo, application_name=None, dbname=None):
        params = parse_conninfo(conninfo)
        host = params.get("host", "/tmp")
        port = params.get("port", "5432")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(f"{host}/.s.PGSQL.{port}")
        self.rfile = self.sock.makefile("rb")
        startup = {
            "user": params.get("user", "postgres"),
            "database": dbname or params.get("dbname", "postgres"),
            "application_name": application_name or params.get("application_name", "bench"),
        }
        body = struct.pack("!i", 196608)
        for key, value in startup.items():
            body += key.encode() + b"\0" + value.encode() + b"\0"
        body += b"\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.pid = None
        while True:
            kind, payload = self._read()
            if kind == b"R":
                (code,) = struct.unpack("!i", payload[:4])
                if code != 0:
                    raise PgError({"M": f"authentication method {code} not supported (trust only)"})
            elif kind == b"K":
                self.pid, _secret = struct.unpack("!ii", payload[:8])
            elif kind == b"E":
                raise PgError(_fields(payload))
            elif kind == b"Z":
                break

    def _read(self):
        head = self.rfile.read(5)
        if len(head) < 5:
            raise PgError({"M": "server closed the connection"})
        kind = head[:1]
        (length,) = struct.unpack("!i", head[1:])
        payload = self.rfile.read(length - 4)
        return kind, payload

    def execute(self, sql):
        """Run one simple query (possibly several statements); return the list of Results.
        Raises PgError after the server is ready again if any statement failed."""
        data = sql.encode() + b"\0"
        self.sock.sendall(b"Q" + struct.pack("!i", len(data) + 4) + data)
        results, current, error = [], Result(), None
        while True:
            kind, payload = self._read()
            if kind == b"T":
                current.columns = _row_description(payload)
            elif kind == b"D":
                current.rows.append(_data_row(payload))
            elif kind == b"C":
                current.tag = payload[:-1].decode()
                results.append(current)
                current = Result()
            elif kind == b"I":
                results.append(current)
                current = Result()
            elif kind == b"E":
                error = PgError(_fields(payload))
            elif kind == b"Z":
                if error is not None:
                    raise error
                return results
            # N (notice), S (parameter status), A (notification): ignored.

    def one(self, sql):
        """The last result of `sql`."""
        return self.execute(sql)[-1]

    def value(self, sql):
        """The first column of the first row of the last result of `sql` (None when no row)."""
        res = self.one(sql)
        return res.rows[0][0] if res.rows else None

    def close(self):
        try:
            self.sock.sendall(b"X" + struct.pack("!i", 4))
        except OSError:
            pass
        self.rfile.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _fields(payload):
    out, i = {}, 0
    while i < len(payload) and payload[i] != 0:
        code = chr(payload[i])
        end = payload.index(b"\0", i + 1)
        out[code] = payload[i + 1 : end].decode(errors="replace")
        i = end + 1
    return out


def _row_description(payload):
    (count,) = struct.unpack("!h", payload[:2])
    names, i = [], 2
    for _ in range(count):
        end = payload.index(b"\0", i)
        names.append(payload[i:end].decode())
        i = end + 1 + 18
    return names


def _data_row(payload):
    (count,) = struct.unpack("!h", payload[:2])
    values, i = [], 2
    for _ in range(count):
        (length,) = struct.unpack("!i", payload[i : i + 4])
        i += 4
        if length < 0:
            values.append(None)
        else:
            values.append(payload[i : i + length].decode())
            i += length
    return values
