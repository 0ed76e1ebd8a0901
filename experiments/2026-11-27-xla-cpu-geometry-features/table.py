import json, sys
for sp in ('validation', 'test'):
    d = json.load(open(f'eval_{sp}.json'))
    print(f"| {sp} | model | MAPE mean | median | pooled | Kendall mean | pooled | MAPE all kernels (mean) |")
    for m in d['summary']:
        s, md, p = d['summary'][m], d['median'][m], d['pooled'][m]
        print(f"| {sp} | {m} | {s['mape']:.1f}% | {md['mape']:.1f}% | {p['mape']:.1f}% | {s['kendall']:.3f} | {p['kendall']:.3f} | {s['mape_all']:.0f}% |")
