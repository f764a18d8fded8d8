#!/usr/bin/env python3
"""Follow-ups in any language (issue 64 item 5): a hand-back or an ask of
tests/data/languages/turns.jsonl between two translated questions of a 200-tool catalog.

    python3 benches/languages_followups.py HALF     # 0 to choose, 1 to report

For each conversation it ranks (with `toolsift eval`, keyword) the second question alone, the
second question leading with the first after a tie mark (a new question), and the first
question joined with the second (a follow-up); for asks the same with the short reply. Then it
prints, for each rule (a text stands alone with at least r of its question's content terms,
or `abs` terms), the mean Recall@5 margin per language against the text's own question alone.
"""
import sys, json, importlib.util, os, subprocess, tempfile
spec=importlib.util.spec_from_file_location('lang', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'languages.py')); m=importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
half=int(sys.argv[1]); B=os.path.join(m.ROOT, 'target', 'release', 'toolsift')
turns=[json.loads(l) for l in open(f'{m.LANGUAGES}/turns.jsonl')]
TIE='\n\u001f'; TURN='\n\u001e'
def run(tools, qs):
    with tempfile.TemporaryDirectory() as d:
        open(f'{d}/t.jsonl','w').write('\n'.join(tools)+'\n')
        with open(f'{d}/q.jsonl','w') as f:
            for q in qs: f.write(json.dumps(q,ensure_ascii=False)+'\n')
        out=subprocess.run([B,'eval','--tools',f'{d}/t.jsonl','--queries',f'{d}/q.jsonl','--k','5','--json','--per-query'],capture_output=True,text=True,check=True).stdout
    return {q['id']:q for q in json.loads(out)['per_query']}
rows=[]
for name in m.NAMES:
    for lang in ['es','de','fr','pt','ja','zh','ar']:
        qs=[q for q in m.read_jsonl(f'{m.LANGUAGES}/{name}/{lang}.jsonl') if q['half']==half]
        hb=[t for t in turns if t['lang']==lang and t['kind']=='handback' and t['half']==half]
        ak=[t for t in turns if t['lang']==lang and t['kind']=='ask' and t['half']==half]
        for gi,(tools,group) in enumerate(m.catalogs(m.tools_lines(name), qs, 200, f'fu-{name}')):
            batch=[]
            for i,a in enumerate(group):
                b=group[(i+1)%len(group)]
                if b is a: continue
                h=hb[(gi*7+i)%len(hb)]; k=ak[(gi*7+i)%len(ak)]
                reply=k['reply']
                base=f'{lang}-{a["id"]}'
                # hand-back then question b: targets b
                for form,text in [('alone',b['query']),('leads',b['query']+TIE+a['query']),('joined',a['query']+TURN+b['query'])]:
                    batch.append({'id':f'hb|{form}|{base}','query':text,'relevant':b['relevant']})
                for form,text in [('alone',a['query']),('leads',reply+TIE+a['query']),('joined',a['query']+TURN+reply)]:
                    batch.append({'id':f'ask|{form}|{base}','query':text,'relevant':a['relevant']})
                batch.append({'id':f'len|reply|{base}','query':reply,'relevant':a['relevant']})
                batch.append({'id':f'len|a|{base}','query':a['query'],'relevant':a['relevant']})
                batch.append({'id':f'len|b|{base}','query':b['query'],'relevant':a['relevant']})
            if batch: rows.append((name,lang,run(tools,batch)))
FU_ROWS = rows
from collections import defaultdict
rows=FU_ROWS
def rec(q,k=5):
    rs=list(q['relevant_ranks'].values()); return sum(1 for r in rs if r is not None and r<=k)/len(rs)
def terms(q): return int(q['reading'].split('/')[1])
convs=[]
for name,lang,res in rows:
    bases=set(k.split('|',2)[2] for k in res)
    for base in bases:
        g=lambda kind,form: res.get(f'{kind}|{form}|{base}')
        if g('hb','alone') is None: continue
        convs.append(dict(name=name,lang=lang,
            hb={f:rec(g('hb',f)) for f in ('alone','leads','joined')},
            ask={f:rec(g('ask',f)) for f in ('alone','leads','joined')},
            reply=terms(g('len','reply')), a=terms(g('len','a')), b=terms(g('len','b'))))
print(len(convs),'conversations')
def evaluate(r):
    out=defaultdict(lambda:[0,0,0,0,0])
    for c in convs:
        def leads(own,q): return own>q or (own>=3 and own>=r*q)
        hb = c['hb']['leads'] if leads(c['b'],c['a']) else c['hb']['joined']
        ak = c['ask']['leads'] if leads(c['reply'],c['a']) else c['ask']['joined']
        o=out[c['lang']]; o[0]+=hb-c['hb']['alone']; o[1]+=ak-c['ask']['alone']; o[2]+=1
    return {l:(v[0]/v[2],v[1]/v[2]) for l,v in out.items()}
for r in [99,1.0,0.8,0.7,0.6,0.5,0.4,0.3]:
    e=evaluate(r)
    print(f'r={r}', ' '.join(f'{l}:{hb:+.3f}/{ak:+.3f}' for l,(hb,ak) in sorted(e.items())), ' worst hb %.3f ask %.3f'%(min(v[0] for v in e.values()),min(v[1] for v in e.values())))
print('always leads:', {l: round(sum(c['hb']['leads']-c['hb']['alone'] for c in convs if c['lang']==l)/sum(1 for c in convs if c['lang']==l),3) for l in sorted(set(c['lang'] for c in convs))})
import statistics
print('reply terms median', statistics.median(c['reply'] for c in convs), 'max', max(c['reply'] for c in convs), 'q terms median', statistics.median(c['a'] for c in convs))
for l in sorted(set(c['lang'] for c in convs)):
    rs=[c['reply']/max(1,c['a']) for c in convs if c['lang']==l]
    print(l,'reply/question ratio max %.2f p90 %.2f'%(max(rs), sorted(rs)[int(.9*len(rs))]))
def evaluate2(r,absn):
    out=defaultdict(lambda:[0,0,0])
    for c in convs:
        def leads(own,q): return own>q or (own>=3 and own>=r*q) or own>=absn
        hb = c['hb']['leads'] if leads(c['b'],c['a']) else c['hb']['joined']
        ak = c['ask']['leads'] if leads(c['reply'],c['a']) else c['ask']['joined']
        o=out[c['lang']]; o[0]+=hb-c['hb']['alone']; o[1]+=ak-c['ask']['alone']; o[2]+=1
    return {l:(v[0]/v[2],v[1]/v[2]) for l,v in out.items()}
for r in [0.6,0.5,0.4]:
  for absn in [6,8,10,12,99]:
    e=evaluate2(r,absn)
    print(f'r={r} abs={absn}', ' '.join(f'{l}:{hb:+.3f}/{ak:+.3f}' for l,(hb,ak) in sorted(e.items())), ' worst hb %.3f ask %.3f'%(min(v[0] for v in e.values()),min(v[1] for v in e.values())))
