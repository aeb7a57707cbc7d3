import sys
def total(p):
    return int(open(p).read().split('summary: ')[1].split()[0])
n = int(sys.argv[1])
for tag in sys.argv[2:]:
    print(tag, f"{(total(f'/tmp/cgs.{tag}.2') - total(f'/tmp/cgs.{tag}.1')) / n:,.0f} instructions/step")
