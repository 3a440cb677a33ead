#!/usr/bin/env python3
"""Stress: T threads publish (temp + rename), rewrite in place (O_TRUNC), unlink and read 4 shared names.

Usage: shared_names.py DIR THREADS SECONDS MODE   (run it on a kvfs mount and on a local dir to compare)
MODE words: 'norename' (no temp + rename publishers), 'nounlink', 'trunc' (in-place O_TRUNC rewriters).
Every file carries its length and MD5, so a read is checked whole. In 'trunc' modes a reader may see a
file being rewritten in place, i.e. a prefix (as on a local fs; docs/semantics.md, cases.md case 4).
Any OSError other than ENOENT is printed. From an adversarial test session (docs/semantics.md, Known
bugs: ESTALE under concurrent same-name O_TRUNC writers).
"""
import os, sys, threading, random, time, errno, hashlib, struct
root=sys.argv[1]; d=root+'/sh_%d'%os.getpid(); os.makedirs(d); T=int(sys.argv[2]); DUR=float(sys.argv[3]); MODE=sys.argv[4]
errs=[]; cnt={'r':0,'ok':0,'enoent':0}
def mk(rnd):
    n=rnd.choice([100,5000,70000,262144]); body=rnd.randbytes(n)
    return struct.pack('<Q',n)+hashlib.md5(body).digest()+body
def valid(b):
    if len(b)<24: return False
    n=struct.unpack('<Q',b[:8])[0]; return len(b)==24+n and hashlib.md5(b[24:]).digest()==b[8:24]
def worker(t):
    rnd=random.Random(t); end=time.time()+DUR; i=0
    while time.time()<end and len(errs)<300:
        f=d+'/k%d'%rnd.randrange(4); op=rnd.randrange(4); i+=1
        try:
            if op==0 and 'norename' not in MODE:
                tmp=f+'.%d_%d.tmp'%(t,i); fd=os.open(tmp,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o644); os.write(fd,mk(rnd)); os.close(fd); os.rename(tmp,f)
            elif op==1 and 'trunc' in MODE:
                fd=os.open(f,os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644); data=mk(rnd)
                for off in range(0,len(data),32768): os.write(fd,data[off:off+32768])
                os.close(fd)
            elif op==2 and 'nounlink' not in MODE:
                os.unlink(f)
            else:
                cnt['r']+=1; b=open(f,'rb').read()
                if valid(b): cnt['ok']+=1
                else: errs.append(('invalid read',t,f[-3:],len(b), struct.unpack('<Q',b[:8])[0]+24 if len(b)>=8 else -1))
        except FileNotFoundError: cnt['enoent']+=1
        except OSError as e: errs.append(('oserr',t,op,errno.errorcode[e.errno]))
for k in range(4): open(d+'/k%d'%k,'wb').write(mk(random.Random(99)))
ts=[threading.Thread(target=worker,args=(t,)) for t in range(T)]; [x.start() for x in ts]; [x.join() for x in ts]
import collections; print(MODE,cnt,collections.Counter(e[0]+':'+str(e[3]) for e in errs)); [print(e) for e in errs if e[0]=='invalid read'][:5]
