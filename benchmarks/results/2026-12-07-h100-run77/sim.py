import torch, sys
torch.manual_seed(0)
V=151936; T=0.8
def sim(rows, N, k=0, p=1.0, S=1.0):
    x=(S*torch.randn(rows,V)).bfloat16().float()
    w=torch.exp(x/T - (x/T).amax(-1,keepdim=True)).double()
    key=x  # monotone
    tot=w.sum(-1)
    counts=[]
    for r in range(rows):
        lo=-1e30; att=0
        while True:
            att+=1
            ww=torch.where(key[r]>=lo, w[r], 0.0)
            idx=torch.multinomial(ww, N, replacement=True)
            found=False
            for j in idx.tolist():
                kv=key[r,j]
                above=key[r]>kv
                ok=True
                if k>0 and above.sum()>=k: ok=False
                if p<1 and w[r][above].sum()>=p*tot[r]: ok=False
                if ok: found=True;break
            if found: break
            lo=key[r,idx].max().item(); lo=torch.nextafter(torch.tensor(lo),torch.tensor(1e30)).item()
        counts.append(att)
    return torch.bincount(torch.tensor(counts)).tolist()
for N in (1,2,4,8):
    print(N, "topk2000", sim(64,N,k=2000), "topp0.5", sim(64,N,p=0.5), "topp.9", sim(64,N,p=0.9))
