"""The host's hands in the compute guest: a QEMU guest agent client.

qemu-ga (Debian's qemu-guest-agent) runs in the guest on a virtio-serial
port whose host end is a unix socket. guest-exec runs a command there and
guest-exec-status returns its exit code and output (stdlib only).
"""

import base64
import json
import socket
import time


class GuestAgentError(Exception):
    pass


class GuestAgent:
    def __init__(self, path):
        self.path = str(path)
        self.sock = None
        self.buf = b''
        self.sync_id = int(time.time()) % 100000

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock = None
        self.buf = b''

    def _connect(self, timeout):
        self.close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(self.path)
        # resynchronise: the agent answers guest-sync-delimited after a
        # 0xff byte, whatever a previous client left in the channel
        self.sync_id += 1
        self.sock.sendall(b'\xff' + json.dumps(
            {'execute': 'guest-sync-delimited',
             'arguments': {'id': self.sync_id}}).encode() + b'\n')
        while True:
            reply = self._read(timeout, delimited=True)
            if reply.get('return') == self.sync_id:
                return

    def _read(self, timeout, delimited=False):
        end = time.monotonic() + timeout
        while True:
            if delimited and b'\xff' in self.buf:
                self.buf = self.buf[self.buf.index(b'\xff') + 1:]
                delimited = False
            if not delimited and b'\n' in self.buf:
                line, _, self.buf = self.buf.partition(b'\n')
                line = line.strip()
                if line:
                    return json.loads(line)
                continue
            left = end - time.monotonic()
            if left <= 0:
                raise socket.timeout('no answer from the guest agent')
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError('guest agent channel closed')
            self.buf += data

    def call(self, command, timeout=30, **arguments):
        if self.sock is None:
            self._connect(timeout)
        msg = {'execute': command}
        if arguments:
            msg['arguments'] = arguments
        try:
            self.sock.sendall(json.dumps(msg).encode() + b'\n')
            reply = self._read(timeout)
        except OSError:
            self.close()
            raise
        if 'error' in reply:
            raise GuestAgentError('%s: %s' % (command, reply['error']))
        return reply.get('return')

    def ping(self, timeout=5):
        try:
            self.call('guest-ping', timeout=timeout)
            return True
        except (OSError, ValueError, GuestAgentError):
            self.close()
            return False

    def sh(self, script, timeout=120):
        """Run a bash script in the guest: (exit code, stdout, stderr)."""
        pid = self.call('guest-exec', path='/bin/bash',
                        arg=['-c', script], **{'capture-output': True})['pid']
        end = time.monotonic() + timeout
        step = 0.05
        while True:
            st = self.call('guest-exec-status', pid=pid)
            if st.get('exited'):
                def text(key):
                    return base64.b64decode(st.get(key, '')).decode(
                        errors='replace')
                return st.get('exitcode', -1), text('out-data'), \
                    text('err-data')
            if time.monotonic() > end:
                raise socket.timeout('guest command still runs after %ds: '
                                     '%s' % (timeout, script[:200]))
            time.sleep(step)
            step = min(step * 2, 0.5)
