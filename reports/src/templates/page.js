(function(){
"use strict";
var data=document.getElementById('events');
var events=data?JSON.parse(data.textContent):[];
var bySeq={};events.forEach(function(e){bySeq[e.seq]=e;});
var tip=document.getElementById('tip');
function seqs(el){var s=el.getAttribute('data-seq');return s?s.split(' ').map(Number):[];}
document.addEventListener('mouseover',function(ev){
  var el=ev.target.closest?ev.target.closest('[data-seq]'):null;
  if(!el){tip.hidden=true;return;}
  var lines=seqs(el).map(function(s){return bySeq[s]?JSON.stringify(bySeq[s]):('event '+s);});
  var title=el.getAttribute('data-title');
  tip.textContent=(title?title+'\n':'')+lines.join('\n');
  tip.hidden=false;
});
document.addEventListener('mousemove',function(ev){
  if(tip.hidden)return;
  var x=ev.clientX+14,y=ev.clientY+14;
  if(x+tip.offsetWidth>window.innerWidth)x=Math.max(0,ev.clientX-tip.offsetWidth-14);
  if(y+tip.offsetHeight>window.innerHeight)y=Math.max(0,ev.clientY-tip.offsetHeight-14);
  tip.style.left=x+'px';tip.style.top=y+'px';
});
document.querySelectorAll('svg.timeline').forEach(function(svg){
  var x0=+svg.getAttribute('data-x0'),w=+svg.getAttribute('data-w'),end=+svg.getAttribute('data-end');
  var view={from:0,to:end};
  function X(t){return x0+(t-view.from)*w/(view.to-view.from);}
  function layout(){
    svg.querySelectorAll('[data-t0]').forEach(function(el){
      var a=X(+el.getAttribute('data-t0')),b=X(+el.getAttribute('data-t1'));
      var min=+(el.getAttribute('data-minw')||1);
      el.setAttribute('x',a);el.setAttribute('width',Math.max(b-a,min));
    });
    svg.querySelectorAll('line[data-t]').forEach(function(el){var x=X(+el.getAttribute('data-t'));el.setAttribute('x1',x);el.setAttribute('x2',x);});
    svg.querySelectorAll('g[data-t]').forEach(function(el){el.setAttribute('transform','translate('+X(+el.getAttribute('data-t'))+',0)');});
    var ticks=svg.querySelector('g.ticks');
    if(ticks){
      var span=view.to-view.from,step=Math.pow(10,Math.floor(Math.log10(span/8)));
      [1,2,5,10].some(function(m){if(span/(step*m)<=10){step*=m;return true;}return false;});
      var h=+svg.getAttribute('height'),html='';
      for(var t=Math.ceil(view.from/step)*step;t<=view.to;t+=step){
        var x=X(t);
        html+='<g class="tick"><line x1="'+x+'" x2="'+x+'" y1="16" y2="'+h+'"></line><text x="'+(x+2)+'" y="12">'+(step>=1000?(t/1000)+' s':t+' ms')+'</text></g>';
      }
      ticks.innerHTML=html;
    }
    var label=svg.parentNode.parentNode.querySelector('.zoom-label');
    if(label)label.textContent=Math.round(view.from)+' to '+Math.round(view.to)+' ms';
  }
  function zoom(factor,at){
    var span=view.to-view.from,ns=Math.min(end,Math.max(5,span*factor));
    var from=at-(at-view.from)*ns/span;
    from=Math.max(0,Math.min(end-ns,from));
    view.from=from;view.to=from+ns;layout();
  }
  function timeAt(clientX){var r=svg.getBoundingClientRect();return view.from+(clientX-r.left-x0)*(view.to-view.from)/w;}
  svg.addEventListener('wheel',function(ev){ev.preventDefault();zoom(ev.deltaY<0?0.8:1.25,timeAt(ev.clientX));},{passive:false});
  var drag=null;
  svg.addEventListener('mousedown',function(ev){drag={x:ev.clientX,from:view.from,to:view.to};svg.classList.add('dragging');});
  window.addEventListener('mouseup',function(){drag=null;svg.classList.remove('dragging');});
  window.addEventListener('mousemove',function(ev){
    if(!drag)return;
    var dt=(ev.clientX-drag.x)*(drag.to-drag.from)/w,span=drag.to-drag.from;
    var from=Math.max(0,Math.min(end-span,drag.from-dt));view.from=from;view.to=from+span;layout();
  });
  var tools=svg.parentNode.parentNode.querySelector('.timeline-tools');
  if(tools){
    tools.querySelectorAll('button[data-zoom]').forEach(function(b){
      b.addEventListener('click',function(){
        var z=b.getAttribute('data-zoom');
        if(z==='reset'){view.from=0;view.to=end;layout();}
        else zoom(+z,(view.from+view.to)/2);
      });
    });
  }
  svg.focusOn=function(t0,t1){var pad=Math.max(20,(t1-t0)*0.3);view.from=Math.max(0,t0-pad);view.to=Math.min(end,t1+pad);if(view.to-view.from<5){view.to=view.from+5;}layout();};
  layout();
});
document.querySelectorAll('[data-evidence]').forEach(function(button){
  button.addEventListener('click',function(){
    var want=button.getAttribute('data-evidence').split(' ').map(Number);
    document.querySelectorAll('svg.timeline .hl').forEach(function(el){el.classList.remove('hl');});
    var t0=Infinity,t1=-Infinity;
    document.querySelectorAll('svg.timeline [data-seq]').forEach(function(el){
      if(seqs(el).some(function(s){return want.indexOf(s)>=0;})){el.classList.add('hl');}
    });
    want.forEach(function(s){var e=bySeq[s];if(e){t0=Math.min(t0,e.t_ms);t1=Math.max(t1,e.t_ms);}});
    var svg=document.querySelector('svg.timeline');
    if(svg&&svg.focusOn&&t0<=t1){svg.focusOn(t0,t1);svg.scrollIntoView({block:'nearest'});}
  });
});
})();
