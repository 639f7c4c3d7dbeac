# How many times does one client POST reach the engines when every replica closes without answering?
exec(open('/tmp/attack/drive.py').read().split("if __name__")[0])
import json
for i in range(4): req('/v1/evil/echo', model='dup')    # warm both pools
n0 = open('/tmp/attack/evil_requests.log','rb').read().count(b'/v1/evil/close_now')
out, _ = req('/v1/evil/close_now', model='dup')
n1 = open('/tmp/attack/evil_requests.log','rb').read().count(b'/v1/evil/close_now')
print(out.split(b'\r\n')[0], out.split(b'\r\n\r\n')[1][:200])
print('one client request was delivered', n1 - n0, 'times')
